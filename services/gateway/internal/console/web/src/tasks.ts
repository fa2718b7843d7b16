// The tasks page: the tenant's tasks with filters, and one task's live
// status, progress, output and result.

import { APIError, call, describe, stream } from "./api";
import { listTable, pagedList } from "./list";
import { field, h, idFromRoute, say } from "./dom";

const statuses = ["", "pending", "assigned", "running", "completed", "failed", "cancelled", "preempted", "suspended"];

// The list reads pages of pageSize tasks, newest first. The API filters by
// status; it has no name filter, so the page matches names itself, reading
// on until a page's worth matched or searchPages pages were read: "Show
// more" goes on from there.
const pageSize = 100;
const searchPages = 20;

export function tasksPage(main: HTMLElement, signal: AbortSignal, selected?: string): void {
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
    h("div", {}, h("button", { type: "submit" }, "Show")),
  );
  // What the list shows: the filters it was read with, the tasks read so
  // far and how many matched, and where the next page starts.
  let shown = { status: "", needle: "", read: 0, matched: 0, next: "" };
  const row = (t: any) =>
    h(
      "tr",
      {},
      h("td", {}, h("button", { type: "button", onclick: () => (location.hash = `#/tasks/${t.id}`) }, t.id.slice(0, 8))),
      h("td", {}, t.name),
      h("td", {}, t.type),
      h("td", {}, h("span", { className: "status " + t.status }, t.status)),
      h("td", {}, `${t.progress ?? 0}%`),
      h("td", {}, t.created_at ? new Date(t.created_at).toLocaleString() : ""),
    );
  const load = pagedList(filters, more, msg, async (fresh: boolean) => {
    if (fresh) shown = { status: status.value, needle: name.value.trim().toLowerCase(), read: 0, matched: 0, next: "" };
    const rows: HTMLElement[] = [];
    for (let pages = 0; pages < (shown.needle ? searchPages : 1); pages++) {
      const q = new URLSearchParams({ page_size: String(pageSize) });
      if (shown.status) q.set("status", shown.status);
      if (shown.next) q.set("page_token", shown.next);
      const r = await call("GET", `/api/v1/tasks?${q}`);
      const tasks: any[] = r.tasks ?? [];
      const matching = tasks.filter((t) => !shown.needle || String(t.name).toLowerCase().includes(shown.needle));
      rows.push(...matching.map(row));
      shown.read += tasks.length;
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
  });
  const table = listTable("tasks", "Tasks, newest first", ["Task", "Name", "Type", "Status", "Progress", "Created"], body);
  // A selected task comes first, where the page opens, above the list it
  // was picked from.
  const heading = h("div", { className: "heading" }, h("h1", {}, "Tasks"), h("a", { href: "#/tasks/new", className: "button", id: "new-task-link" }, "New task"));
  main.append(heading, detail, filters, msg, h("div", { className: "card table-wrap" }, table, more));
  void load(true);
  if (selected) {
    const id = idFromRoute(selected);
    if (id === null) detail.replaceChildren(h("p", { className: "card error" }, "This address does not hold a task id."));
    else taskDetail(detail, id, signal);
  }
}

// What a task's status allows (docs/api/tasks.md): cancel any task that
// is not final, retry a failed or cancelled one.
const cancellable = new Set(["pending", "assigned", "running", "preempted", "suspended"]);
const retryable = new Set(["failed", "cancelled"]);

// taskDetail follows one task live until it is final, then shows its
// result. Cancel and Retry show when the task's status allows them; the
// page follows the task again after a retry.
function taskDetail(into: HTMLElement, id: string, signal: AbortSignal): void {
  // The id comes from the address: it is one path segment of every call.
  const path = `/api/v1/tasks/${encodeURIComponent(id)}`;
  const status = h("span", { className: "status", "data-task-status": "" }, "…");
  const progress = h("progress", { max: 100, value: 0, "aria-label": "Task progress" });
  const message = h("p", { className: "msg", role: "status", "aria-live": "polite", "data-task-message": "" });
  const output = h("pre", { "aria-label": "Output" });
  const result = h("div", {});
  const reason = h("input", { type: "text", name: "cancel-reason", id: "cancel-reason", maxLength: 1024, autocomplete: "off" });
  const cancel = h("button", { type: "submit", id: "task-cancel", className: "danger" }, "Cancel task");
  const cancelForm = h("form", { className: "row actions", "aria-label": "Cancel the task", hidden: true },
    field("Reason for cancelling (optional)", reason), h("div", {}, cancel));
  const retry = h("button", { type: "button", id: "task-retry", hidden: true }, "Retry task");
  const actionMsg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "task-action-status" });
  const audit = h("a", { href: `#/audit?resource=task&resource_id=${encodeURIComponent(id)}` }, "Audit log of this task");
  into.replaceChildren(
    h("section", { className: "card", "aria-label": `Task ${id}` }, h("h2", {}, "Task ", h("code", {}, id), " — ", status), progress, message,
      cancelForm, retry, actionMsg, result, output, h("p", {}, audit)),
  );
  // show draws a frame or the task itself. Why a task failed or was
  // cancelled (error) outranks the last progress message it reported.
  const show = (t: any) => {
    status.textContent = t.status;
    status.className = "status " + t.status;
    progress.value = t.progress ?? 0;
    say(message, t.error || t.progress_message || "", Boolean(t.error));
    cancelForm.hidden = !cancellable.has(t.status);
    retry.hidden = !retryable.has(t.status);
    // A frame names the task by task_id, the task itself by id: the
    // audit log knows it by that id, not by a client's name for it.
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
  const finish = async (until: AbortSignal) => {
    try {
      const t = await call("GET", path);
      if (until.aborted) return;
      show(t);
      const r = await call("GET", `${path}/result`);
      if (until.aborted) return;
      output.textContent = [r.stdout, r.stderr].filter(Boolean).join("\n--- stderr ---\n") || "(no output)";
      result.replaceChildren(
        h("p", {}, `Result: ${r.status}${r.exit_code != null ? `, exit code ${r.exit_code}` : ""}`),
        r.presigned_url ? h("a", { href: r.presigned_url }, "Download the result object") : "",
      );
    } catch (err) {
      say(message, describe(err), true);
    }
  };
  // follow reads the task's live stream until it is final (then its
  // result); a retry follows it again from its current state.
  let following: AbortController | null = null;
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
          // While the stream is down the task is read instead, so the
          // page shows where it is (and its actions) all the same.
          try {
            const t = await call("GET", path);
            if (mine.signal.aborted) return;
            show(t);
            if (!cancellable.has(t.status)) break;
          } catch (again) {
            if (again instanceof APIError && again.status === 404) {
              gone = true;
              deleted();
              break;
            }
          }
          say(message, "Live updates interrupted; reading the task every 4 seconds.", true);
          await new Promise((r) => setTimeout(r, 4000));
        }
      }
      if (following === mine) live = false;
      if (!gone && !mine.signal.aborted) await finish(mine.signal);
    })();
  };
  // act sends one action; its answer (the task) shows at once, and the
  // live stream goes on from there. A refusal is shown with its code,
  // and the task read again: the page may have been behind it.
  const act = async (what: string, action: string, body: unknown, done: string) => {
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
        // Changed elsewhere since the stream ended (retried): follow it.
        if (!live && cancellable.has(t.status)) follow();
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
