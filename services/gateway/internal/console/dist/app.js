// src/api.ts
var keyName = "taskmesh.apiKey";
function apiKey() {
  return sessionStorage.getItem(keyName);
}
function setAPIKey(key) {
  if (key === null) sessionStorage.removeItem(keyName);
  else sessionStorage.setItem(keyName, key);
}
var APIError = class extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
};
function headers(extra) {
  return { Authorization: "Bearer " + (apiKey() ?? ""), ...extra ?? {} };
}
async function failure(resp) {
  let code = String(resp.status);
  let message = resp.statusText;
  try {
    const body = await resp.json();
    code = String(body.code ?? code);
    message = body.message ?? message;
  } catch {
  }
  return new APIError(resp.status, code, message);
}
function describe(err) {
  if (err instanceof APIError) return `${err.code}: ${err.message}`;
  if (err instanceof TypeError && /fetch/i.test(err.message)) {
    return "Taskmesh could not be reached; check the connection and try again.";
  }
  return err instanceof Error ? err.message : String(err);
}
async function call(method, path, body) {
  const init = { method, headers: headers(body === void 0 ? void 0 : { "Content-Type": "application/json" }) };
  if (body !== void 0) init.body = JSON.stringify(body);
  const resp = await fetch(path, init);
  if (!resp.ok) throw await failure(resp);
  return await resp.json();
}
async function upload(kind, file) {
  const form = new FormData();
  form.append("kind", kind);
  form.append("file", file, file.name);
  const resp = await fetch("/jobs/uploads", { method: "POST", headers: headers(), body: form });
  if (!resp.ok) throw await failure(resp);
  return (await resp.json()).key;
}
async function stream(path, lastID, onFrame, signal) {
  const h2 = headers({ Accept: "text/event-stream" });
  if (lastID) h2["Last-Event-ID"] = lastID;
  const resp = await fetch(path, { headers: h2, signal });
  if (resp.status === 204) return;
  if (!resp.ok || !resp.body) throw await failure(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let cur = { id: "", event: "", data: null };
  let closed = false;
  for (; ; ) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (cur.event === "close") closed = true;
        else if (cur.event) onFrame(cur);
        cur = { id: "", event: "", data: null };
      } else if (line.startsWith("id: ")) cur.id = line.slice(4);
      else if (line.startsWith("event: ")) cur.event = line.slice(7);
      else if (line.startsWith("data: ")) cur.data = JSON.parse(line.slice(6));
    }
  }
  if (closed) throw new APIError(0, "closed", "the stream was closed early");
}
function socket(path) {
  const url = new URL(path, location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return new WebSocket(url.toString(), ["taskmesh.bearer", apiKey() ?? ""]);
}

// src/dom.ts
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === void 0 || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k in el && !k.includes("-") && k !== "list") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === void 0 || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(c));
  }
  return el;
}
var ids = 0;
function uid(prefix) {
  ids++;
  return `${prefix}-${ids}`;
}
function field(label, control, hint) {
  if (!control.id) control.id = uid("f");
  if (!hint) return h("div", {}, h("label", { htmlFor: control.id }, label), control);
  const note = h("small", { className: "hint", id: uid("hint") }, hint);
  control.setAttribute("aria-describedby", note.id);
  return h("div", {}, h("label", { htmlFor: control.id }, label), control, note);
}
function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return isNaN(d.getTime()) ? ts : h("time", { dateTime: ts }, d.toLocaleString());
}
function idFromRoute(arg) {
  let id;
  try {
    id = decodeURIComponent(arg).trim();
  } catch {
    return null;
  }
  return id === "" || id === "." || id === ".." || id.includes("/") ? null : id;
}
function say(el, text, error = false) {
  el.textContent = text;
  el.classList.toggle("error", error);
}

// src/list.ts
function pagedList(filters, more, msg, read) {
  let busy = false;
  const load = async (fresh) => {
    if (busy) return;
    busy = true;
    more.disabled = true;
    say(msg, "Loading…");
    try {
      await read(fresh);
    } catch (err) {
      say(msg, describe(err), true);
    } finally {
      busy = false;
      more.disabled = false;
    }
  };
  filters.addEventListener("submit", (e) => {
    e.preventDefault();
    void load(true);
  });
  more.addEventListener("click", () => void load(false));
  return load;
}
function listTable(className, caption, columns, body) {
  return h(
    "table",
    className ? { className } : {},
    h("caption", { className: "msg" }, caption),
    h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { scope: "col" }, c)))),
    body
  );
}

// src/audit.ts
var resources = [
  "",
  "task",
  "task_group",
  "template",
  "job",
  "tenant",
  "cluster",
  "quota",
  "cluster_queue",
  "cohort",
  "local_queue",
  "tenant_account",
  "api_key",
  "admin_key",
  "agent"
];
var pageSize = 100;
var pages = { task: "#/tasks/", task_group: "#/groups/", job: "#/pipeline/" };
function details(raw) {
  if (!raw || raw === "{}") return "";
  let obj;
  try {
    obj = JSON.parse(raw);
  } catch {
    return h("code", {}, raw);
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return h("code", {}, raw);
  return h(
    "ul",
    { className: "details" },
    ...Object.entries(obj).map(([k, v]) => h("li", {}, h("span", { className: "muted" }, `${k}: `), typeof v === "string" ? v : JSON.stringify(v)))
  );
}
function auditPage(main2, query) {
  const resource = h("select", { name: "resource" }, ...resources.map((r) => h("option", { value: r }, r || "any")));
  const action = h("input", { type: "text", name: "action", autocomplete: "off", spellcheck: false });
  const resourceID = h("input", { type: "text", name: "resource_id", autocomplete: "off", spellcheck: false });
  resource.value = resources.includes(query.get("resource") ?? "") ? query.get("resource") ?? "" : "";
  action.value = query.get("action") ?? "";
  resourceID.value = query.get("resource_id") ?? "";
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "audit-status" });
  const body = h("tbody", {});
  const more = h("button", { type: "button", className: "secondary", id: "audit-more", hidden: true }, "Show more");
  const filters = h(
    "form",
    { className: "card row", role: "search", "aria-label": "Filter the audit log" },
    field("Resource", resource),
    field("Action", action, "A whole action (task.created) or, with a resource, its verb (created)."),
    field("Resource id", resourceID),
    h("div", {}, h("button", { type: "submit" }, "Show"))
  );
  let shown = { filters: new URLSearchParams(), count: 0, next: "" };
  const row = (e) => {
    const page = pages[e.resource];
    const id = e.resource_id ? page ? h("a", { href: page + encodeURIComponent(e.resource_id) }, e.resource_id) : h("code", {}, e.resource_id) : "";
    const dot = String(e.action).indexOf(".");
    const act = dot < 0 ? e.action : [e.action.slice(0, dot + 1), h("wbr"), e.action.slice(dot + 1)];
    return h(
      "tr",
      { "data-audit": e.id, "data-action": e.action },
      h("td", { "data-label": "Time" }, when(e.timestamp)),
      h("td", { "data-label": "Action" }, ...[act].flat()),
      h("td", { "data-label": "Resource" }, e.resource, " ", id),
      h("td", { "data-label": "By" }, e.user_id),
      h("td", { "data-label": "Address" }, e.ip),
      h("td", { "data-label": "Details" }, details(e.details))
    );
  };
  const load = pagedList(filters, more, msg, async (fresh) => {
    if (fresh) {
      const f = new URLSearchParams();
      if (resource.value) f.set("resource", resource.value);
      if (action.value.trim()) f.set("action", action.value.trim());
      if (resourceID.value.trim()) f.set("resource_id", resourceID.value.trim());
      shown = { filters: f, count: 0, next: "" };
      const q2 = f.toString();
      history.replaceState(null, "", q2 ? `#/audit?${q2}` : "#/audit");
    }
    const q = new URLSearchParams(shown.filters);
    q.set("page_size", String(pageSize));
    if (shown.next) q.set("page_token", shown.next);
    const r = await call("GET", `/api/v1/audit-logs?${q}`);
    const entries = r.audit_logs ?? [];
    const rows = entries.map(row);
    if (fresh) body.replaceChildren(...rows);
    else body.append(...rows);
    shown.count += entries.length;
    shown.next = r.next_page_token ?? "";
    const what = `${shown.count} entr${shown.count === 1 ? "y" : "ies"}`;
    say(msg, shown.next ? `${what}; “Show more” reads older ones.` : `${what} (the log trails changes by a moment).`);
    more.hidden = !shown.next;
  });
  const table = listTable("audit stack", "Audit log, newest first", ["Time", "Action", "Resource", "By", "Address", "Details"], body);
  main2.append(h("h1", {}, "Audit log"), filters, msg, h("div", { className: "card table-wrap" }, table, more));
  void load(true);
}

// src/groups.ts
var statuses = ["", "pending", "running", "completed", "failed", "cancelled"];
var modes = ["", "serial", "parallel", "dag", "repeat"];
var pageSize2 = 50;
var pollEvery = 4e3;
function groupsPage(main2, signal, selected) {
  if (selected) {
    const id = idFromRoute(selected);
    if (id === null) {
      main2.append(h("h1", {}, "Task group"), h("p", { className: "card error" }, "This address does not hold a task group id."));
      return;
    }
    groupDetail(main2, id, signal);
    return;
  }
  const status = h("select", { name: "status" }, ...statuses.map((s) => h("option", { value: s }, s || "any")));
  const mode = h("select", { name: "mode" }, ...modes.map((m) => h("option", { value: m }, m || "any")));
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "groups-status" });
  const body = h("tbody", {});
  const more = h("button", { type: "button", className: "secondary", id: "groups-more", hidden: true }, "Show more");
  const filters = h(
    "form",
    { className: "card row", role: "search", "aria-label": "Filter task groups" },
    field("Status", status),
    field("Mode", mode),
    h("div", {}, h("button", { type: "submit" }, "Show"))
  );
  let shown = { status: "", mode: "", count: 0, next: "" };
  const row = (g) => h(
    "tr",
    { "data-group": g.id },
    h("td", {}, h("a", { href: `#/groups/${encodeURIComponent(g.id)}` }, g.name || g.id)),
    h("td", {}, g.mode),
    h("td", {}, h("span", { className: "status " + g.status }, g.status)),
    h("td", {}, String(g.total ?? "")),
    h("td", {}, when(g.created_at))
  );
  const load = pagedList(filters, more, msg, async (fresh) => {
    if (fresh) shown = { status: status.value, mode: mode.value, count: 0, next: "" };
    const q = new URLSearchParams({ page_size: String(pageSize2) });
    if (shown.status) q.set("status", shown.status);
    if (shown.mode) q.set("mode", shown.mode);
    if (shown.next) q.set("page_token", shown.next);
    const r = await call("GET", `/api/v1/task-groups?${q}`);
    const groups = r.groups ?? [];
    const rows = groups.map(row);
    if (fresh) body.replaceChildren(...rows);
    else body.append(...rows);
    shown.count += groups.length;
    shown.next = r.next_page_token ?? "";
    const what = `${shown.count} group${shown.count === 1 ? "" : "s"}`;
    say(msg, shown.next ? `${what}; “Show more” reads older ones.` : `${what}.`);
    more.hidden = !shown.next;
  });
  const table = listTable("", "Task groups, newest first", ["Group", "Mode", "Status", "Members", "Created"], body);
  main2.append(h("h1", {}, "Task groups"), filters, msg, h("div", { className: "card table-wrap" }, table, more));
  void load(true);
}
var startable = /* @__PURE__ */ new Set(["pending"]);
var cancellable = /* @__PURE__ */ new Set(["pending", "running"]);
function groupDetail(main2, id, signal) {
  const title = h("span", {}, id);
  const status = h("span", { className: "status", "data-group-status": "" }, "…");
  const facts = h("dl", { className: "facts" });
  const message = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "group-message" });
  const live = h("p", { className: "msg", role: "status", "aria-live": "polite" });
  const start = h("button", { type: "button", id: "group-start", hidden: true }, "Start group");
  const reason = h("input", { type: "text", name: "group-cancel-reason", id: "group-cancel-reason", maxLength: 1024, autocomplete: "off" });
  const cancel = h("button", { type: "submit", id: "group-cancel", className: "danger" }, "Cancel group");
  const cancelForm = h(
    "form",
    { className: "row actions", "aria-label": "Cancel the group", hidden: true },
    field("Reason for cancelling (optional)", reason),
    h("div", {}, cancel)
  );
  const actionMsg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "group-action-status" });
  const members = h("tbody", { id: "group-members" });
  const membersMsg = h("p", { className: "msg", id: "group-members-status" });
  const table = h(
    "table",
    { className: "stack" },
    h("caption", { className: "msg" }, "Members, in group order"),
    h("thead", {}, h("tr", {}, ...["Member", "Name", "Status", "Task"].map((c) => h("th", { scope: "col" }, c)))),
    members
  );
  main2.append(
    h("h1", {}, "Task group"),
    h("p", {}, h("a", { href: "#/groups" }, "All task groups")),
    h(
      "section",
      { className: "card", "aria-labelledby": "group-title" },
      h("h2", { id: "group-title" }, title, " — ", status),
      facts,
      message,
      live,
      start,
      cancelForm,
      actionMsg,
      h("p", {}, h("a", { href: `#/audit?resource=task_group&resource_id=${encodeURIComponent(id)}` }, "Audit log of this group"))
    ),
    h("section", { className: "card table-wrap", "aria-label": "Members" }, table, membersMsg)
  );
  const known = /* @__PURE__ */ new Map();
  const member = (m) => h(
    "tr",
    { "data-member": m.id },
    h("td", { "data-label": "Member" }, h("code", {}, m.id)),
    h("td", { "data-label": "Name" }, m.name ?? ""),
    h("td", { "data-label": "Status" }, h("span", { className: "status " + m.status, "data-member-status": "" }, m.status)),
    h("td", { "data-label": "Task" }, m.task_id ? h("a", { href: `#/tasks/${encodeURIComponent(m.task_id)}`, "data-member-task": m.task_id }, m.task_id) : "not released yet")
  );
  let view = false;
  const show = (g, all) => {
    title.textContent = g.name || id;
    status.textContent = g.status;
    status.className = "status " + g.status;
    const counts = Object.entries(g.counts ?? {}).filter(([, n]) => Number(n) > 0).map(([s, n]) => `${n} ${s}`).join(", ");
    const fact = (k, v) => v === "" ? [] : [h("dt", {}, k), h("dd", {}, v)];
    facts.replaceChildren(
      ...fact("Id", h("code", {}, g.id ?? id)),
      ...fact("Mode", g.mode ?? ""),
      ...fact("Members", `${g.total ?? 0}${counts ? ` (${counts})` : ""}`),
      ...fact("Created", when(g.created_at)),
      ...fact("Started", when(g.started_at)),
      ...fact("Ended", when(g.ended_at))
    );
    say(message, g.error ?? "", Boolean(g.error));
    start.hidden = view || !startable.has(g.status);
    cancelForm.hidden = view || !cancellable.has(g.status);
    const tasks = g.tasks ?? [];
    if (all) known.clear();
    for (const m of tasks) known.set(m.id, m);
    members.replaceChildren(...[...known.values()].map(member));
    membersMsg.textContent = known.size ? "" : "No members yet.";
  };
  const gone = () => {
    status.textContent = "deleted";
    status.className = "status deleted";
    say(message, "No such task group: it was deleted, or never was.", true);
    say(live, "");
    start.hidden = true;
    cancelForm.hidden = true;
  };
  const read = async () => show(await call("GET", `/api/v1/task-groups/${encodeURIComponent(id)}`), true);
  void (async () => {
    let last = "";
    for (let tries = 0; tries < 100 && !signal.aborted; tries++) {
      try {
        await stream(`/api/v1/task-groups/${encodeURIComponent(id)}/events`, last, (f) => {
          last = f.id;
          say(live, "");
          if (f.event === "deleted" || f.data?.deleted) gone();
          else show(f.data, f.data?.change === "snapshot");
        }, signal);
        await read();
        return;
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof APIError && err.status === 404) {
          gone();
          return;
        }
        say(live, "Live updates interrupted; reading the group every 4 seconds.", true);
        try {
          await read();
        } catch (again) {
          if (again instanceof APIError && again.status === 404) {
            gone();
            return;
          }
        }
        await new Promise((r) => setTimeout(r, pollEvery));
      }
    }
  })();
  const act = async (what, path, body, done) => {
    start.disabled = cancel.disabled = true;
    say(actionMsg, `${what}…`);
    try {
      const g = await call("POST", `/api/v1/task-groups/${encodeURIComponent(id)}/${path}`, body);
      show(g, (g.tasks ?? []).length > 0);
      say(actionMsg, done);
      return true;
    } catch (err) {
      say(actionMsg, `${what} failed. ${describe(err)}`, true);
      try {
        await read();
        if (err instanceof APIError && err.status === 404) {
          view = true;
          start.hidden = cancelForm.hidden = true;
          say(actionMsg, "These tasks share a group id but form no task group (a fan-out's, say): they cannot be started or cancelled together. Cancel them one by one on their pages.", true);
        }
      } catch (again) {
        if (again instanceof APIError && again.status === 404) gone();
      }
      return false;
    } finally {
      start.disabled = cancel.disabled = false;
    }
  };
  start.addEventListener("click", () => void act("Starting the group", "start", {}, "Group started."));
  cancelForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const why = reason.value.trim();
    if (await act("Cancelling the group", "cancel", why ? { reason: why } : {}, "Group cancelled.")) reason.value = "";
  });
}

// src/newtask.ts
var types = ["shell", "python", "script", "noop"];
function lines(text) {
  return text.split(/\r?\n/).filter((l) => l.trim() !== "");
}
function parseEnv(text) {
  const env = {};
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim() === "") return;
    const eq = line.indexOf("=");
    const key = eq < 0 ? "" : line.slice(0, eq).trim();
    if (!key) throw new Error(`Environment line ${i + 1} is not KEY=VALUE.`);
    if (key in env) throw new Error(`Environment variable ${key} is given twice.`);
    env[key] = line.slice(eq + 1);
  });
  return env;
}
function newTaskPage(main2) {
  const name = h("input", { type: "text", name: "name", required: true, autocomplete: "off" });
  const type = h("select", { name: "type" }, ...types.map((t) => h("option", { value: t }, t)));
  const command = h("textarea", { name: "command", rows: 2, spellcheck: false });
  const args = h("textarea", { name: "args", rows: 3, spellcheck: false });
  const workdir = h("input", { type: "text", name: "workdir", autocomplete: "off", spellcheck: false });
  const env = h("textarea", { name: "env", rows: 3, spellcheck: false });
  const number = (n, min, max, placeholder) => h("input", { type: "number", name: n, min, max, step: 1, placeholder, inputMode: "numeric" });
  const priority = number("priority", 1, 10, "5");
  const timeout = number("timeout", 1, 604800, "3600");
  const retries = number("max_retries", 0, 100, "3");
  const submit = h("button", { type: "submit", id: "create-task" }, "Create task");
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "create-status" });
  const controls = { name, type, command, args, workdir, env, priority, timeout, max_retries: retries };
  const form = h(
    "form",
    { className: "card", "aria-labelledby": "new-task" },
    h("h2", { id: "new-task" }, "Task"),
    field("Name", name),
    field("Type", type, "shell and python run the command directly (no shell); script runs it as a /bin/sh script; noop runs nothing."),
    field("Command", command, "Without arguments below, a whole command line: its words are split as a shell would, nothing is expanded."),
    field("Arguments", args, "One per line; blank lines are left out."),
    field("Working directory", workdir, "An absolute path; empty: a directory of its own on the agent."),
    field("Environment", env, "KEY=VALUE, one per line."),
    h(
      "div",
      { className: "row" },
      field("Priority", priority, "1 (highest) to 10; empty: 5."),
      field("Timeout (seconds)", timeout, "Empty: 3600."),
      field("Retries", retries, "0 to 100; empty: 3.")
    ),
    h("div", { className: "buttons" }, submit, h("a", { href: "#/tasks" }, "Back to the tasks")),
    msg
  );
  const clearMarks = () => {
    for (const c of Object.values(controls)) c.removeAttribute("aria-invalid");
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearMarks();
    let body;
    try {
      body = { name: name.value, type: type.value };
      if (command.value.trim() !== "") body.command = command.value;
      const a = lines(args.value);
      if (a.length) body.args = a;
      if (workdir.value.trim() !== "") body.workdir = workdir.value.trim();
      const vars = parseEnv(env.value);
      if (Object.keys(vars).length) body.env = vars;
      for (const [key, input] of [["priority", priority], ["timeout", timeout], ["max_retries", retries]]) {
        if (input.value !== "") body[key] = Number(input.value);
      }
    } catch (err) {
      env.setAttribute("aria-invalid", "true");
      say(msg, describe(err), true);
      env.focus();
      return;
    }
    submit.disabled = true;
    say(msg, "Creating the task…");
    try {
      const t = await call("POST", "/api/v1/tasks", body);
      location.hash = `#/tasks/${encodeURIComponent(t.id)}`;
    } catch (err) {
      say(msg, `The task was not created. ${describe(err)}`, true);
      if (err instanceof APIError) {
        const named = /(?:^|[\s:])(name|type|command|args|workdir|env|priority|timeout|max_retries)\b(?:\[[^\]]*\])?:/.exec(err.message);
        const control = named ? controls[named[1]] : void 0;
        if (control) {
          control.setAttribute("aria-invalid", "true");
          control.focus();
        }
      }
    } finally {
      submit.disabled = false;
    }
  });
  main2.append(h("h1", {}, "New task"), form);
}

// src/pipeline.ts
var jobsKey = "taskmesh.jobs";
var pollEvery2 = 4e3;
var stages = ["ONNX", "BIE", "NEF"];
var restarted = "系統已重啟,請重新送出";
function savedJobs() {
  try {
    return JSON.parse(sessionStorage.getItem(jobsKey) ?? "[]");
  } catch {
    return [];
  }
}
function saveJobs(ids2) {
  sessionStorage.setItem(jobsKey, JSON.stringify(ids2));
}
function pipelinePage(main2, signal, selected) {
  const model = h("input", { type: "file", required: true, accept: ".onnx", name: "model" });
  const quant = h("input", { type: "file", required: true, accept: ".zip", name: "quant" });
  const refs = h("input", { type: "file", multiple: true, accept: "image/*", name: "ref_images" });
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "submit-status" });
  const submit = h("button", { type: "submit", id: "submit-job" }, "Upload and convert");
  const jobs = h("div", { id: "jobs" });
  const form = h(
    "form",
    { className: "card", "aria-labelledby": "new-job" },
    h("h2", { id: "new-job" }, "New conversion"),
    field("Model (ONNX)", model),
    field("Quantization archive (quant.zip)", quant),
    field("Reference images (optional)", refs),
    submit,
    msg
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const m = model.files?.[0];
    const q = quant.files?.[0];
    if (!m || !q) {
      say(msg, "Choose a model and a quantization archive.", true);
      return;
    }
    submit.disabled = true;
    try {
      say(msg, "Uploading the model…");
      const modelKey = await upload("model", m);
      say(msg, "Uploading the quantization archive…");
      const quantKey = await upload("quant", q);
      const refKeys = [];
      for (const f of Array.from(refs.files ?? [])) {
        say(msg, `Uploading ${f.name}…`);
        refKeys.push(await upload("ref_image", f));
      }
      const job = await call("POST", "/jobs", { model_key: modelKey, quant_key: quantKey, ref_image_keys: refKeys });
      say(msg, `Job ${job.job_id} started.`);
      saveJobs([job.job_id, ...savedJobs()]);
      jobs.prepend(jobCard(job.job_id, signal));
      form.reset();
    } catch (err) {
      say(msg, describe(err), true);
    } finally {
      submit.disabled = false;
    }
  });
  const jobID = h("input", {
    type: "text",
    required: true,
    name: "job_id",
    id: "job-id",
    autocomplete: "off",
    placeholder: "00000000-0000-4000-8000-000000000000",
    spellcheck: false
  });
  const findMsg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "find-status" });
  const find = h(
    "form",
    { className: "card", "aria-labelledby": "find-job" },
    h("h2", { id: "find-job" }, "Look up a job"),
    field("Job id", jobID),
    h("button", { type: "submit", id: "find-job-submit" }, "Show job"),
    findMsg
  );
  const lookUp = async (id) => {
    const shown = jobs.querySelector(`[data-job="${CSS.escape(id)}"]`);
    if (shown) {
      say(findMsg, `Job ${id} is shown below.`);
      shown.scrollIntoView();
      return;
    }
    try {
      const job = await call("GET", `/jobs/${encodeURIComponent(id)}`);
      say(findMsg, "");
      saveJobs([job.job_id, ...savedJobs()]);
      jobs.prepend(jobCard(job.job_id, signal));
      find.reset();
    } catch (err) {
      if (err instanceof APIError && err.code === "JOB_NOT_FOUND") {
        say(findMsg, `${restarted} — no job ${id} is known: the system may have restarted. Please submit it again.`, true);
      } else {
        say(findMsg, describe(err), true);
      }
    }
  };
  find.addEventListener("submit", (e) => {
    e.preventDefault();
    const id = jobIDOf(jobID.value);
    if (id) void lookUp(id);
  });
  main2.append(h("h1", {}, "Model conversion"), form, find, h("h2", {}, "Jobs"), jobs);
  for (const id of savedJobs()) jobs.append(jobCard(id, signal));
  if (selected) {
    let id = "";
    try {
      id = jobIDOf(decodeURIComponent(selected));
    } catch {
    }
    if (id) void lookUp(id);
    else say(findMsg, "This link does not hold a job id: paste the id in the form above.", true);
  }
}
function jobIDOf(text) {
  return text.trim().toLowerCase();
}
function jobCard(id, signal) {
  const status = h("span", { className: "status", "data-job-status": "" }, "…");
  const live = h("p", { className: "msg", role: "status", "aria-live": "polite", "data-job-live": "" });
  const bars = stages.map((s) => {
    const p = h("progress", { max: 100, value: 0, "aria-label": `${s} stage progress` });
    const pct = h("span", {}, "0%");
    return { s, p, pct, row: h("div", { className: "stage" }, h("span", {}, s), p, pct) };
  });
  const downloads = h("div", { className: "downloads" });
  const error = h("p", { className: "error", role: "alert" });
  const card = h(
    "section",
    { className: "card", "data-job": id, "aria-label": `Job ${id}` },
    h("h3", {}, "Job ", h("a", { href: `#/pipeline/${encodeURIComponent(id)}` }, h("code", {}, id)), " — ", status),
    ...bars.map((b) => b.row),
    error,
    downloads,
    live
  );
  let version = "";
  let final = false;
  const show = (job) => {
    status.textContent = job.status;
    status.className = "status " + job.status;
    const cur = stages.indexOf(job.stage);
    bars.forEach((b, i) => {
      let v = 0;
      if (job.status === "COMPLETED" || i < cur) v = 100;
      else if (i === cur) v = job.progress ?? 0;
      b.p.value = v;
      b.pct.textContent = `${v}%`;
    });
    if (job.error) {
      const reason = String(job.error.reason ?? "").replace(/\.$/, "");
      error.textContent = `The ${job.error.step} stage failed: ${reason}. Please submit the job again.`;
    }
    final = job.status === "COMPLETED" || job.status === "FAILED";
    if (final) void showDownloads(id, downloads);
  };
  const gone = () => {
    final = true;
    status.textContent = "unknown";
    error.textContent = `${restarted} — This job is not known any more: the system restarted. Please submit it again.`;
    saveJobs(savedJobs().filter((j) => j !== id));
  };
  const follow = async () => {
    while (!final && !signal.aborted) {
      try {
        say(live, "Live.");
        await stream(`/jobs/${id}/events`, version, (f) => {
          version = f.id;
          show(f.data);
        }, signal);
        if (final) break;
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof APIError && err.code === "JOB_NOT_FOUND") return gone();
        say(live, "Live updates interrupted; checking every 4 seconds.");
      }
      await new Promise((r) => setTimeout(r, pollEvery2));
      if (signal.aborted) return;
      try {
        const job = await call("GET", `/jobs/${id}`);
        show(job);
      } catch (err) {
        if (err instanceof APIError && err.code === "JOB_NOT_FOUND") return gone();
      }
    }
    say(live, "");
  };
  void follow();
  return card;
}
async function showDownloads(id, into) {
  try {
    const d = await call("GET", `/jobs/${id}/downloads`);
    const links = [];
    const add = (url, label, file, testid) => {
      if (url) links.push(h("a", { href: url, download: file, "data-download": testid }, label));
    };
    add(d.bie_url, "Download BIE", "result.bie", "bie");
    add(d.nef_url, "Download NEF", "result.nef", "nef");
    for (const s of ["onnx", "bie", "nef"]) add(d.logs?.[s], `${s.toUpperCase()} log`, `${s}.log`, `${s}-log`);
    into.replaceChildren(...links);
  } catch (err) {
    into.replaceChildren(h("span", { className: "error" }, describe(err)));
  }
}

// src/tasks.ts
var statuses2 = ["", "pending", "assigned", "running", "completed", "failed", "cancelled", "preempted", "suspended"];
var pageSize3 = 100;
var searchPages = 20;
function tasksPage(main2, signal, selected) {
  const status = h("select", { name: "status" }, ...statuses2.map((s) => h("option", { value: s }, s || "any")));
  const name = h("input", { type: "text", name: "name", placeholder: "part of the name" });
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "tasks-status" });
  const body = h("tbody", {});
  const more = h("button", { type: "button", className: "secondary", id: "tasks-more", hidden: true }, "Show more");
  const detail = h("div", { id: "task-detail" });
  const filters = h(
    "form",
    { className: "card row", role: "search", "aria-label": "Filter tasks" },
    field("Status", status),
    field("Name contains", name),
    h("div", {}, h("button", { type: "submit" }, "Show"))
  );
  let shown = { status: "", needle: "", read: 0, matched: 0, next: "" };
  const row = (t) => h(
    "tr",
    {},
    h("td", {}, h("button", { type: "button", onclick: () => location.hash = `#/tasks/${t.id}` }, t.id.slice(0, 8))),
    h("td", {}, t.name),
    h("td", {}, t.type),
    h("td", {}, h("span", { className: "status " + t.status }, t.status)),
    h("td", {}, `${t.progress ?? 0}%`),
    h("td", {}, t.created_at ? new Date(t.created_at).toLocaleString() : "")
  );
  const load = pagedList(filters, more, msg, async (fresh) => {
    if (fresh) shown = { status: status.value, needle: name.value.trim().toLowerCase(), read: 0, matched: 0, next: "" };
    const rows = [];
    for (let pages2 = 0; pages2 < (shown.needle ? searchPages : 1); pages2++) {
      const q = new URLSearchParams({ page_size: String(pageSize3) });
      if (shown.status) q.set("status", shown.status);
      if (shown.next) q.set("page_token", shown.next);
      const r = await call("GET", `/api/v1/tasks?${q}`);
      const tasks2 = r.tasks ?? [];
      const matching = tasks2.filter((t) => !shown.needle || String(t.name).toLowerCase().includes(shown.needle));
      rows.push(...matching.map(row));
      shown.read += tasks2.length;
      shown.matched += matching.length;
      shown.next = r.next_page_token ?? "";
      if (!shown.next || rows.length >= pageSize3) break;
    }
    if (fresh) body.replaceChildren(...rows);
    else body.append(...rows);
    const tasks = `${shown.matched} task${shown.matched === 1 ? "" : "s"}`;
    const what = shown.needle ? `${tasks} whose name contains “${name.value.trim()}” among the newest ${shown.read}` : tasks;
    say(msg, shown.next ? `${what}; “Show more” reads older ones.` : `${what} (the list trails new tasks by a moment).`);
    more.hidden = !shown.next;
  });
  const table = listTable("tasks", "Tasks, newest first", ["Task", "Name", "Type", "Status", "Progress", "Created"], body);
  const heading = h("div", { className: "heading" }, h("h1", {}, "Tasks"), h("a", { href: "#/tasks/new", className: "button", id: "new-task-link" }, "New task"));
  main2.append(heading, detail, filters, msg, h("div", { className: "card table-wrap" }, table, more));
  void load(true);
  if (selected) {
    const id = idFromRoute(selected);
    if (id === null) detail.replaceChildren(h("p", { className: "card error" }, "This address does not hold a task id."));
    else taskDetail(detail, id, signal);
  }
}
var cancellable2 = /* @__PURE__ */ new Set(["pending", "assigned", "running", "preempted", "suspended"]);
var retryable = /* @__PURE__ */ new Set(["failed", "cancelled"]);
function taskDetail(into, id, signal) {
  const path = `/api/v1/tasks/${encodeURIComponent(id)}`;
  const status = h("span", { className: "status", "data-task-status": "" }, "…");
  const progress = h("progress", { max: 100, value: 0, "aria-label": "Task progress" });
  const message = h("p", { className: "msg", role: "status", "aria-live": "polite", "data-task-message": "" });
  const output = h("pre", { "aria-label": "Output" });
  const result = h("div", {});
  const reason = h("input", { type: "text", name: "cancel-reason", id: "cancel-reason", maxLength: 1024, autocomplete: "off" });
  const cancel = h("button", { type: "submit", id: "task-cancel", className: "danger" }, "Cancel task");
  const cancelForm = h(
    "form",
    { className: "row actions", "aria-label": "Cancel the task", hidden: true },
    field("Reason for cancelling (optional)", reason),
    h("div", {}, cancel)
  );
  const retry = h("button", { type: "button", id: "task-retry", hidden: true }, "Retry task");
  const actionMsg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "task-action-status" });
  const audit = h("a", { href: `#/audit?resource=task&resource_id=${encodeURIComponent(id)}` }, "Audit log of this task");
  into.replaceChildren(
    h(
      "section",
      { className: "card", "aria-label": `Task ${id}` },
      h("h2", {}, "Task ", h("code", {}, id), " — ", status),
      progress,
      message,
      cancelForm,
      retry,
      actionMsg,
      result,
      output,
      h("p", {}, audit)
    )
  );
  const show = (t) => {
    status.textContent = t.status;
    status.className = "status " + t.status;
    progress.value = t.progress ?? 0;
    say(message, t.error || t.progress_message || "", Boolean(t.error));
    cancelForm.hidden = !cancellable2.has(t.status);
    retry.hidden = !retryable.has(t.status);
    const taskID = t.task_id || t.id;
    if (taskID) audit.href = `#/audit?resource=task&resource_id=${encodeURIComponent(taskID)}`;
  };
  const deleted = () => {
    status.textContent = "deleted";
    status.className = "status deleted";
    say(message, "This task was deleted.", true);
    cancelForm.hidden = true;
    retry.hidden = true;
  };
  const finish = async (until) => {
    try {
      const t = await call("GET", path);
      if (until.aborted) return;
      show(t);
      const r = await call("GET", `${path}/result`);
      if (until.aborted) return;
      output.textContent = [r.stdout, r.stderr].filter(Boolean).join("\n--- stderr ---\n") || "(no output)";
      result.replaceChildren(
        h("p", {}, `Result: ${r.status}${r.exit_code != null ? `, exit code ${r.exit_code}` : ""}`),
        r.presigned_url ? h("a", { href: r.presigned_url }, "Download the result object") : ""
      );
    } catch (err) {
      say(message, describe(err), true);
    }
  };
  let following = null;
  let live = false;
  const follow = () => {
    following?.abort();
    const mine = new AbortController();
    following = mine;
    signal.addEventListener("abort", () => mine.abort(), { once: true });
    live = true;
    void (async () => {
      let last = "";
      let gone = false;
      for (let tries = 0; tries < 100 && !mine.signal.aborted; tries++) {
        try {
          await stream(`${path}/events`, last, (f) => {
            last = f.id;
            if (f.event === "deleted" || f.data?.deleted) {
              gone = true;
              deleted();
            } else show(f.data);
          }, mine.signal);
          break;
        } catch (err) {
          if (mine.signal.aborted) return;
          if (err instanceof APIError && err.status === 404) {
            say(message, "No such task.", true);
            return;
          }
          try {
            const t = await call("GET", path);
            if (mine.signal.aborted) return;
            show(t);
            if (!cancellable2.has(t.status)) break;
          } catch (again) {
            if (again instanceof APIError && again.status === 404) {
              gone = true;
              deleted();
              break;
            }
          }
          say(message, "Live updates interrupted; reading the task every 4 seconds.", true);
          await new Promise((r) => setTimeout(r, 4e3));
        }
      }
      if (following === mine) live = false;
      if (!gone && !mine.signal.aborted) await finish(mine.signal);
    })();
  };
  const act = async (what, action, body, done) => {
    cancel.disabled = retry.disabled = true;
    say(actionMsg, `${what}…`);
    try {
      const t = await call("POST", `${path}/${action}`, body);
      show(t);
      say(actionMsg, done);
      return true;
    } catch (err) {
      say(actionMsg, `${what} failed. ${describe(err)}`, true);
      try {
        const t = await call("GET", path);
        show(t);
        if (!live && cancellable2.has(t.status)) follow();
      } catch (again) {
        if (again instanceof APIError && again.status === 404) deleted();
      }
      return false;
    } finally {
      cancel.disabled = retry.disabled = false;
    }
  };
  cancelForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const why = reason.value.trim();
    if (await act("Cancelling the task", "cancel", why ? { reason: why } : {}, "Task cancelled.")) reason.value = "";
  });
  retry.addEventListener("click", async () => {
    if (await act("Retrying the task", "retry", {}, "Task put back to pending.")) {
      output.textContent = "";
      result.replaceChildren();
      follow();
    }
  });
  follow();
}

// src/usage.ts
var groupings = ["day", "model", "queue", "flavor", "stage", "tenant"];
function utcDay(d) {
  return d.toISOString().slice(0, 10);
}
function utcTime(ts) {
  const d = new Date(String(ts));
  return isNaN(d.getTime()) ? String(ts ?? "") : `${d.toISOString().slice(0, 16).replace("T", " ")} UTC`;
}
function amount(v) {
  return Number(v ?? 0).toLocaleString(void 0, { minimumFractionDigits: 2, maximumFractionDigits: 6 });
}
function seconds(v) {
  const n = Number(v ?? 0);
  return n.toLocaleString(void 0, { maximumFractionDigits: 1 });
}
function usagePage(main2) {
  const today = /* @__PURE__ */ new Date();
  const from = h("input", {
    type: "date",
    name: "from",
    required: true,
    value: utcDay(new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), 1)))
  });
  const to = h("input", { type: "date", name: "to", required: true, value: utcDay(today) });
  const groupBy = h("select", { name: "group_by" }, ...groupings.map((g) => h("option", { value: g }, g)));
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "usage-status" });
  const body = h("tbody", {});
  const foot = h("tfoot", {});
  const keyHead = h("th", { scope: "col" }, "Day");
  const caption = h("caption", { className: "msg" }, "Usage by day");
  const amountHead = h("th", { scope: "col" }, "Amount");
  const form = h(
    "form",
    { className: "card row", "aria-label": "Usage range" },
    field("From (UTC day)", from),
    field("To (UTC day, included)", to),
    field("Group by", groupBy),
    h("div", {}, h("button", { type: "submit", id: "usage-show" }, "Show"))
  );
  const cells = (r, currency) => [
    h("td", {}, seconds(r.gpu_seconds)),
    h("td", {}, seconds(r.cpu_seconds)),
    h("td", {}, seconds(r.video_seconds)),
    h("td", {}, seconds(r.stage_seconds)),
    h("td", {}, String(r.items ?? 0)),
    h("td", {}, `${amount(r.amount)} ${currency}`)
  ];
  let busy = false;
  const load = async () => {
    if (busy) return;
    busy = true;
    say(msg, "Loading…");
    try {
      const q = new URLSearchParams({ from: from.value, to: to.value, group_by: groupBy.value });
      const r = await call("GET", `/api/v1/usage?${q}`);
      const currency = r.currency ?? "";
      const rows = r.rows ?? [];
      keyHead.textContent = groupBy.value[0].toUpperCase() + groupBy.value.slice(1);
      caption.textContent = `Usage by ${groupBy.value}`;
      amountHead.textContent = currency ? `Amount (${currency})` : "Amount";
      body.replaceChildren(...rows.map((row) => h("tr", { "data-usage-key": row.key }, h("th", { scope: "row" }, row.key), ...cells(row, currency))));
      foot.replaceChildren(h("tr", { "data-usage-total": "" }, h("th", { scope: "row" }, "Total"), ...cells(r.total ?? {}, currency)));
      const what = rows.length ? `${rows.length} row${rows.length === 1 ? "" : "s"} of usage` : "No usage";
      say(msg, `${what} from ${utcTime(r.from)} up to ${utcTime(r.to)}.`);
    } catch (err) {
      body.replaceChildren();
      foot.replaceChildren();
      say(msg, describe(err), true);
    } finally {
      busy = false;
    }
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void load();
  });
  const table = h(
    "table",
    { id: "usage-table" },
    caption,
    h("thead", {}, h("tr", {}, keyHead, ...["GPU seconds", "CPU seconds", "Video seconds", "Stage seconds", "Items"].map((c) => h("th", { scope: "col" }, c)), amountHead)),
    body,
    foot
  );
  main2.append(h("h1", {}, "Usage"), form, msg, h("div", { className: "card table-wrap" }, table));
  void load();
}

// src/video.ts
var pollEvery3 = 4e3;
var finalStatuses = ["SUCCEEDED", "FAILED", "CANCELED", "UNKNOWN"];
function videoPage(main2, signal) {
  const model = h(
    "select",
    { name: "model" },
    h("option", { value: "wan2.2-t2v" }, "Text to video (wan2.2-t2v)"),
    h("option", { value: "wan2.2-i2v" }, "Image to video (wan2.2-i2v)")
  );
  const prompt = h("textarea", { name: "prompt", required: true, maxLength: 800 });
  const image = h("input", { type: "file", accept: "image/jpeg,image/png,image/bmp,image/webp", name: "image" });
  const resolution = h("select", { name: "resolution" }, ...["480P", "720P", "1080P"].map((r) => h("option", { value: r }, r)));
  const submit = h("button", { type: "submit", id: "generate" }, "Generate");
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite" });
  const progress = h("progress", { max: 100, value: 0, "aria-label": "Generation progress", id: "video-progress" });
  const status = h("span", { className: "status", "data-video-status": "" });
  const player = h("div", { id: "player" });
  const form = h(
    "form",
    { className: "card", "aria-label": "New video" },
    field("Model", model),
    field("Prompt", prompt),
    field("First frame (image to video)", image),
    field("Resolution", resolution),
    submit,
    msg
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    submit.disabled = true;
    player.replaceChildren();
    progress.value = 0;
    status.textContent = "";
    status.className = "status";
    say(msg, "");
    try {
      const input = { prompt: prompt.value };
      const file = image.files?.[0];
      if (model.value === "wan2.2-i2v") {
        if (!file) throw new Error("Image to video needs a first frame.");
        input.image = await dataURL(file);
      }
      const r = await call("POST", "/v1/video/generations", { model: model.value, input, parameters: { resolution: resolution.value } });
      say(msg, `Generation ${r.output.task_id} queued.`);
      follow(r.output.task_id);
    } catch (err) {
      say(msg, describe(err), true);
      submit.disabled = false;
    }
  });
  const follow = (id) => {
    let final = false;
    let played = false;
    const show = (d) => {
      progress.value = d.taskProgress ?? 0;
      status.textContent = d.task_status;
      status.className = "status " + d.task_status;
      if (!finalStatuses.includes(d.task_status)) return;
      final = true;
      submit.disabled = false;
      if (d.task_status === "FAILED") say(msg, d.message || "The generation failed.", true);
      else if (d.task_status !== "SUCCEEDED") say(msg, `The generation is ${d.task_status}.`, true);
      else if (!played) {
        played = true;
        void play(id);
      }
    };
    const live = () => {
      const ws = socket(`/v1/video/generations/${id}/ws`);
      const stop = () => ws.close();
      signal.addEventListener("abort", stop);
      ws.onmessage = (ev) => show(JSON.parse(ev.data).data);
      ws.onclose = () => {
        signal.removeEventListener("abort", stop);
        if (final || signal.aborted) return;
        say(msg, "Live updates interrupted; checking every 4 seconds.");
        void poll();
      };
    };
    const poll = async () => {
      await new Promise((r) => setTimeout(r, pollEvery3));
      if (signal.aborted) return;
      try {
        show((await call("GET", `/v1/video/generations/${id}`)).data);
      } catch {
      }
      if (!final && !signal.aborted) live();
    };
    live();
  };
  const play = async (id) => {
    const g = await call("GET", `/v1/video/generations/${id}`);
    const url = g.data?.taskInput?.video_url;
    if (!url) {
      say(msg, "The generation succeeded but has no video link.", true);
      return;
    }
    progress.value = 100;
    say(msg, "Done.");
    player.replaceChildren(h("video", { src: url, controls: true, autoplay: true, muted: true, playsInline: true, id: "video" }));
  };
  main2.append(
    h("h1", {}, "Video generation"),
    form,
    h("section", { className: "card", "aria-label": "Progress" }, h("p", {}, "Status: ", status), progress, player)
  );
}
function dataURL(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });
}

// src/main.ts
var main = document.getElementById("main");
var nav = document.getElementById("nav");
var current = null;
function signIn() {
  const key = h("input", { type: "password", name: "api-key", autocomplete: "off", required: true, id: "api-key" });
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite" });
  const form = h(
    "form",
    { className: "card", "aria-label": "Sign in" },
    h("p", {}, "Sign in with a tenant's API key. It is kept in this tab only."),
    field("API key", key),
    h("button", { type: "submit", id: "sign-in" }, "Sign in"),
    msg
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const value = key.value.trim();
    if (!/^[\x21-\x7e]+$/.test(value)) {
      say(msg, "An API key has only letters, digits and punctuation (tm_…): check what was pasted.", true);
      return;
    }
    setAPIKey(value);
    try {
      await call("GET", "/api/v1/tasks?page_size=1");
      location.hash = "#/pipeline";
    } catch (err) {
      setAPIKey(null);
      say(msg, describe(err), true);
    }
  });
  main.append(h("h1", {}, "Taskmesh console"), form);
  key.focus();
}
function notFound(main2) {
  const links = [...nav.querySelectorAll("a")].map((a) => h("a", { href: a.getAttribute("href") ?? "#/" }, a.textContent ?? ""));
  const list = [];
  links.forEach((a, i) => list.push(i === 0 ? "" : i === links.length - 1 ? " or " : ", ", a));
  main2.append(h("h1", {}, "No such page"), h("p", { className: "card" }, "The console has no page at this address. Go to ", ...list, "."));
}
function route() {
  current?.abort();
  current = new AbortController();
  main.replaceChildren();
  const mark = location.hash.indexOf("?");
  const path = mark < 0 ? location.hash : location.hash.slice(0, mark);
  const query = mark < 0 ? "" : location.hash.slice(mark + 1);
  const [, page, arg] = path.split("/");
  const signedIn = apiKey() !== null;
  nav.hidden = !signedIn;
  for (const a of nav.querySelectorAll("a")) {
    if (a.getAttribute("href") === `#/${page}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!signedIn) return signIn();
  switch (page) {
    case "tasks":
      if (arg === "new") newTaskPage(main);
      else tasksPage(main, current.signal, arg);
      break;
    case "groups":
      groupsPage(main, current.signal, arg);
      break;
    case "audit":
      auditPage(main, new URLSearchParams(query));
      break;
    case "usage":
      usagePage(main);
      break;
    case "video":
      videoPage(main, current.signal);
      break;
    case "pipeline":
      pipelinePage(main, current.signal, arg);
      break;
    case void 0:
    case "":
      pipelinePage(main, current.signal);
      break;
    default:
      notFound(main);
  }
  main.focus();
}
document.getElementById("signout")?.addEventListener("click", () => {
  setAPIKey(null);
  sessionStorage.clear();
  location.hash = "#/";
  route();
});
window.addEventListener("hashchange", route);
route();
