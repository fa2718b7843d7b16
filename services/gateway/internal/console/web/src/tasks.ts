// The tasks page: the tenant's tasks with filters, and one task's live
// status, progress, output and result.

import { APIError, call, stream } from "./api";
import { field, h, say } from "./dom";

const statuses = ["", "pending", "assigned", "running", "completed", "failed", "cancelled", "preempted", "suspended"];

export function tasksPage(main: HTMLElement, signal: AbortSignal, selected?: string): void {
  const status = h("select", { name: "status" }, ...statuses.map((s) => h("option", { value: s }, s || "any")));
  const name = h("input", { type: "text", name: "name", placeholder: "part of the name" });
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite" });
  const body = h("tbody", {});
  const detail = h("div", { id: "task-detail" });
  const filters = h(
    "form",
    { className: "card row", role: "search", "aria-label": "Filter tasks" },
    field("Status", status),
    field("Name contains", name),
    h("div", {}, h("button", { type: "submit" }, "Show")),
  );
  const load = async () => {
    say(msg, "Loading…");
    try {
      const q = new URLSearchParams({ page_size: "100" });
      if (status.value) q.set("status", status.value);
      const r = await call("GET", `/api/v1/tasks?${q}`);
      const needle = name.value.trim().toLowerCase();
      const tasks = (r.tasks ?? []).filter((t: any) => !needle || String(t.name).toLowerCase().includes(needle));
      body.replaceChildren(
        ...tasks.map((t: any) =>
          h(
            "tr",
            {},
            h("td", {}, h("button", { type: "button", onclick: () => (location.hash = `#/tasks/${t.id}`) }, t.id.slice(0, 8))),
            h("td", {}, t.name),
            h("td", {}, t.type),
            h("td", {}, h("span", { className: "status " + t.status }, t.status)),
            h("td", {}, `${t.progress ?? 0}%`),
            h("td", {}, t.created_at ? new Date(t.created_at).toLocaleString() : ""),
          ),
        ),
      );
      say(msg, `${tasks.length} tasks (the list trails new tasks by a moment).`);
    } catch (err) {
      say(msg, err instanceof APIError ? `${err.code}: ${err.message}` : String(err), true);
    }
  };
  filters.addEventListener("submit", (e) => {
    e.preventDefault();
    void load();
  });
  const table = h(
    "table",
    {},
    h("caption", { className: "msg" }, "Tasks, newest first"),
    h("thead", {}, h("tr", {}, ...["Task", "Name", "Type", "Status", "Progress", "Created"].map((c) => h("th", { scope: "col" }, c)))),
    body,
  );
  main.append(h("h1", {}, "Tasks"), filters, msg, h("div", { className: "card" }, table), detail);
  void load();
  if (selected) taskDetail(detail, selected, signal);
}

// taskDetail follows one task live until it is final, then shows its
// result.
function taskDetail(into: HTMLElement, id: string, signal: AbortSignal): void {
  const status = h("span", { className: "status", "data-task-status": "" }, "…");
  const progress = h("progress", { max: 100, value: 0, "aria-label": "Task progress" });
  const message = h("p", { className: "msg", role: "status", "aria-live": "polite" });
  const output = h("pre", { "aria-label": "Output" });
  const result = h("div", {});
  into.replaceChildren(
    h("section", { className: "card", "aria-label": `Task ${id}` }, h("h2", {}, "Task ", h("code", {}, id), " — ", status), progress, message, result, output),
  );
  const show = (t: any) => {
    status.textContent = t.status;
    status.className = "status " + t.status;
    progress.value = t.progress ?? 0;
    say(message, t.progress_message || t.error || "");
  };
  const finish = async () => {
    try {
      const t = await call("GET", `/api/v1/tasks/${id}`);
      show(t);
      const r = await call("GET", `/api/v1/tasks/${id}/result`);
      output.textContent = [r.stdout, r.stderr].filter(Boolean).join("\n--- stderr ---\n") || "(no output)";
      result.replaceChildren(
        h("p", {}, `Result: ${r.status}${r.exit_code != null ? `, exit code ${r.exit_code}` : ""}`),
        r.presigned_url ? h("a", { href: r.presigned_url }, "Download the result object") : "",
      );
    } catch (err) {
      say(message, err instanceof APIError ? `${err.code}: ${err.message}` : String(err), true);
    }
  };
  void (async () => {
    let last = "";
    for (let tries = 0; tries < 100 && !signal.aborted; tries++) {
      try {
        await stream(`/api/v1/tasks/${id}/events`, last, (f) => {
          last = f.id;
          show(f.data);
        }, signal);
        break;
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof APIError && err.status === 404) {
          say(message, "No such task.", true);
          return;
        }
        await new Promise((r) => setTimeout(r, 4000));
      }
    }
    await finish();
  })();
}
