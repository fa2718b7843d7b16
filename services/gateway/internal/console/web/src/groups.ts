// The task groups page (#/groups): the tenant's groups, newest first,
// filtered by status and mode; and one group (#/groups/{id}) followed
// live, its members with their tasks' statuses and links to the tasks,
// with Start and Cancel where the group's status allows them.

import { APIError, call, describe, stream } from "./api";
import { listTable, pagedList } from "./list";
import { field, h, idFromRoute, say, when } from "./dom";

const statuses = ["", "pending", "running", "completed", "failed", "cancelled"];
const modes = ["", "serial", "parallel", "dag", "repeat"];
const pageSize = 50;
const pollEvery = 4000;

export function groupsPage(main: HTMLElement, signal: AbortSignal, selected?: string): void {
  if (selected) {
    const id = idFromRoute(selected);
    if (id === null) {
      main.append(h("h1", {}, "Task group"), h("p", { className: "card error" }, "This address does not hold a task group id."));
      return;
    }
    groupDetail(main, id, signal);
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
    h("div", {}, h("button", { type: "submit" }, "Show")),
  );
  let shown = { status: "", mode: "", count: 0, next: "" };
  const row = (g: any) =>
    h(
      "tr",
      { "data-group": g.id },
      h("td", {}, h("a", { href: `#/groups/${encodeURIComponent(g.id)}` }, g.name || g.id)),
      h("td", {}, g.mode),
      h("td", {}, h("span", { className: "status " + g.status }, g.status)),
      h("td", {}, String(g.total ?? "")),
      h("td", {}, when(g.created_at)),
    );
  const load = pagedList(filters, more, msg, async (fresh: boolean) => {
    if (fresh) shown = { status: status.value, mode: mode.value, count: 0, next: "" };
    const q = new URLSearchParams({ page_size: String(pageSize) });
    if (shown.status) q.set("status", shown.status);
    if (shown.mode) q.set("mode", shown.mode);
    if (shown.next) q.set("page_token", shown.next);
    const r = await call("GET", `/api/v1/task-groups?${q}`);
    const groups: any[] = r.groups ?? [];
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
  main.append(h("h1", {}, "Task groups"), filters, msg, h("div", { className: "card table-wrap" }, table, more));
  void load(true);
}

// What a group's status allows (docs/api/task-groups.md).
const startable = new Set(["pending"]);
const cancellable = new Set(["pending", "running"]);

// groupDetail shows one group and follows its live stream until the
// group and every member have ended (reading the group every 4 s while
// the stream is down).
function groupDetail(main: HTMLElement, id: string, signal: AbortSignal): void {
  const title = h("span", {}, id);
  const status = h("span", { className: "status", "data-group-status": "" }, "…");
  const facts = h("dl", { className: "facts" });
  const message = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "group-message" });
  const live = h("p", { className: "msg", role: "status", "aria-live": "polite" });
  const start = h("button", { type: "button", id: "group-start", hidden: true }, "Start group");
  const reason = h("input", { type: "text", name: "group-cancel-reason", id: "group-cancel-reason", maxLength: 1024, autocomplete: "off" });
  const cancel = h("button", { type: "submit", id: "group-cancel", className: "danger" }, "Cancel group");
  const cancelForm = h("form", { className: "row actions", "aria-label": "Cancel the group", hidden: true },
    field("Reason for cancelling (optional)", reason), h("div", {}, cancel));
  const actionMsg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "group-action-status" });
  const members = h("tbody", { id: "group-members" });
  const membersMsg = h("p", { className: "msg", id: "group-members-status" });
  const table = h(
    "table",
    { className: "stack" },
    h("caption", { className: "msg" }, "Members, in group order"),
    h("thead", {}, h("tr", {}, ...["Member", "Name", "Status", "Task"].map((c) => h("th", { scope: "col" }, c)))),
    members,
  );
  main.append(
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
      h("p", {}, h("a", { href: `#/audit?resource=task_group&resource_id=${encodeURIComponent(id)}` }, "Audit log of this group")),
    ),
    h("section", { className: "card table-wrap", "aria-label": "Members" }, table, membersMsg),
  );
  // The members as last seen, by member id, in group order.
  const known = new Map<string, any>();
  const member = (m: any) =>
    h(
      "tr",
      { "data-member": m.id },
      h("td", { "data-label": "Member" }, h("code", {}, m.id)),
      h("td", { "data-label": "Name" }, m.name ?? ""),
      h("td", { "data-label": "Status" }, h("span", { className: "status " + m.status, "data-member-status": "" }, m.status)),
      h("td", { "data-label": "Task" }, m.task_id ? h("a", { href: `#/tasks/${encodeURIComponent(m.task_id)}`, "data-member-task": m.task_id }, m.task_id) : "not released yet"),
    );
  // show draws the group; with all, its tasks are every member (a
  // snapshot, an answer), else the members that changed.
  // view: the id names no task group but tasks that share it as their
  // group_id (a fan-out's); the API shows them as a group that no route
  // changes (docs/api/task-groups.md, "Fan-outs as groups"). Nothing in
  // the answer says so: an action refused with 404 while the group still
  // reads is how the page learns it.
  let view = false;
  const show = (g: any, all: boolean) => {
    title.textContent = g.name || id;
    status.textContent = g.status;
    status.className = "status " + g.status;
    const counts = Object.entries(g.counts ?? {}).filter(([, n]) => Number(n) > 0).map(([s, n]) => `${n} ${s}`).join(", ");
    const fact = (k: string, v: Node | string) => (v === "" ? [] : [h("dt", {}, k), h("dd", {}, v)]);
    facts.replaceChildren(
      ...fact("Id", h("code", {}, g.id ?? id)),
      ...fact("Mode", g.mode ?? ""),
      ...fact("Members", `${g.total ?? 0}${counts ? ` (${counts})` : ""}`),
      ...fact("Created", when(g.created_at)),
      ...fact("Started", when(g.started_at)),
      ...fact("Ended", when(g.ended_at)),
    );
    say(message, g.error ?? "", Boolean(g.error));
    start.hidden = view || !startable.has(g.status);
    cancelForm.hidden = view || !cancellable.has(g.status);
    const tasks: any[] = g.tasks ?? [];
    if (all) known.clear();
    for (const m of tasks) known.set(m.id, m);
    members.replaceChildren(...[...known.values()].map(member));
    membersMsg.textContent = known.size ? "" : "No members yet.";
  };
  // gone shows a group deleted meanwhile (or never there) as such, with
  // no actions left to offer.
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
        // Ended: the group and every member are final. Read it once more
        // (a client that had the final frame is answered 204).
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
          // still down: try again
        }
        await new Promise((r) => setTimeout(r, pollEvery));
      }
    }
  })();
  const act = async (what: string, path: string, body: unknown, done: string) => {
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
          say(actionMsg, "These tasks share a group id but form no task group (a fan-out's, say): " +
            "they cannot be started or cancelled together. Cancel them one by one on their pages.", true);
        }
      } catch (again) {
        // Otherwise the refusal is what the page says.
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
