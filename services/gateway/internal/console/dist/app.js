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
function field(label, control) {
  if (!control.id) control.id = uid("f");
  return h("div", {}, h("label", { htmlFor: control.id }, label), control);
}
function say(el, text, error = false) {
  el.textContent = text;
  el.classList.toggle("error", error);
}

// src/pipeline.ts
var jobsKey = "taskmesh.jobs";
var pollEvery = 4e3;
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
      await new Promise((r) => setTimeout(r, pollEvery));
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
var statuses = ["", "pending", "assigned", "running", "completed", "failed", "cancelled", "preempted", "suspended"];
var pageSize = 100;
var searchPages = 20;
function tasksPage(main2, signal, selected) {
  const status = h("select", { name: "status" }, ...statuses.map((s) => h("option", { value: s }, s || "any")));
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
  let busy = false;
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
  const load = async (fresh) => {
    if (busy) return;
    busy = true;
    more.disabled = true;
    say(msg, "Loading…");
    if (fresh) shown = { status: status.value, needle: name.value.trim().toLowerCase(), read: 0, matched: 0, next: "" };
    try {
      const rows = [];
      for (let pages = 0; pages < (shown.needle ? searchPages : 1); pages++) {
        const q = new URLSearchParams({ page_size: String(pageSize) });
        if (shown.status) q.set("status", shown.status);
        if (shown.next) q.set("page_token", shown.next);
        const r = await call("GET", `/api/v1/tasks?${q}`);
        const tasks2 = r.tasks ?? [];
        const matching = tasks2.filter((t) => !shown.needle || String(t.name).toLowerCase().includes(shown.needle));
        rows.push(...matching.map(row));
        shown.read += tasks2.length;
        shown.matched += matching.length;
        shown.next = r.next_page_token ?? "";
        if (!shown.next || rows.length >= pageSize) break;
      }
      if (fresh) body.replaceChildren(...rows);
      else body.append(...rows);
      const tasks = `${shown.matched} task${shown.matched === 1 ? "" : "s"}`;
      const what = shown.needle ? `${tasks} whose name contains “${name.value.trim()}” among the newest ${shown.read}` : tasks;
      say(msg, shown.next ? `${what}; “Show more” reads older ones.` : `${what} (the list trails new tasks by a moment).`);
      more.hidden = !shown.next;
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
  const table = h(
    "table",
    {},
    h("caption", { className: "msg" }, "Tasks, newest first"),
    h("thead", {}, h("tr", {}, ...["Task", "Name", "Type", "Status", "Progress", "Created"].map((c) => h("th", { scope: "col" }, c)))),
    body
  );
  main2.append(h("h1", {}, "Tasks"), detail, filters, msg, h("div", { className: "card table-wrap" }, table, more));
  void load(true);
  if (selected) taskDetail(detail, selected, signal);
}
function taskDetail(into, id, signal) {
  const status = h("span", { className: "status", "data-task-status": "" }, "…");
  const progress = h("progress", { max: 100, value: 0, "aria-label": "Task progress" });
  const message = h("p", { className: "msg", role: "status", "aria-live": "polite", "data-task-message": "" });
  const output = h("pre", { "aria-label": "Output" });
  const result = h("div", {});
  into.replaceChildren(
    h("section", { className: "card", "aria-label": `Task ${id}` }, h("h2", {}, "Task ", h("code", {}, id), " — ", status), progress, message, result, output)
  );
  const show = (t) => {
    status.textContent = t.status;
    status.className = "status " + t.status;
    progress.value = t.progress ?? 0;
    say(message, t.error || t.progress_message || "", Boolean(t.error));
  };
  const deleted = () => {
    status.textContent = "deleted";
    status.className = "status deleted";
    say(message, "This task was deleted.", true);
  };
  const finish = async () => {
    try {
      const t = await call("GET", `/api/v1/tasks/${id}`);
      show(t);
      const r = await call("GET", `/api/v1/tasks/${id}/result`);
      output.textContent = [r.stdout, r.stderr].filter(Boolean).join("\n--- stderr ---\n") || "(no output)";
      result.replaceChildren(
        h("p", {}, `Result: ${r.status}${r.exit_code != null ? `, exit code ${r.exit_code}` : ""}`),
        r.presigned_url ? h("a", { href: r.presigned_url }, "Download the result object") : ""
      );
    } catch (err) {
      say(message, describe(err), true);
    }
  };
  void (async () => {
    let last = "";
    let gone = false;
    for (let tries = 0; tries < 100 && !signal.aborted; tries++) {
      try {
        await stream(`/api/v1/tasks/${id}/events`, last, (f) => {
          last = f.id;
          if (f.event === "deleted" || f.data?.deleted) {
            gone = true;
            deleted();
          } else show(f.data);
        }, signal);
        break;
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof APIError && err.status === 404) {
          say(message, "No such task.", true);
          return;
        }
        say(message, "Live updates interrupted; trying again every 4 seconds.", true);
        await new Promise((r) => setTimeout(r, 4e3));
      }
    }
    if (!gone && !signal.aborted) await finish();
  })();
}

// src/video.ts
var pollEvery2 = 4e3;
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
      await new Promise((r) => setTimeout(r, pollEvery2));
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
  main2.append(
    h("h1", {}, "No such page"),
    h(
      "p",
      { className: "card" },
      "The console has no page at this address. Go to ",
      h("a", { href: "#/pipeline" }, "Pipeline"),
      ", ",
      h("a", { href: "#/tasks" }, "Tasks"),
      " or ",
      h("a", { href: "#/video" }, "Video"),
      "."
    )
  );
}
function route() {
  current?.abort();
  current = new AbortController();
  main.replaceChildren();
  const [, page, arg] = location.hash.split("/");
  const signedIn = apiKey() !== null;
  nav.hidden = !signedIn;
  for (const a of nav.querySelectorAll("a")) {
    if (a.getAttribute("href") === `#/${page}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (!signedIn) return signIn();
  switch (page) {
    case "tasks":
      tasksPage(main, current.signal, arg);
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
