// The audit page (#/audit): the tenant's audit log, newest first, 100
// entries at a time, filtered by resource, action and resource id. The
// filters are kept in the address (#/audit?resource=task&action=cancelled),
// so a task's or a group's page links to its own entries.

import { call } from "./api";
import { listTable, pagedList } from "./list";
import { field, h, say, when } from "./dom";

// The resources of docs/api/audit.md.
const resources = ["", "task", "task_group", "template", "job", "tenant", "cluster", "quota", "cluster_queue", "cohort", "local_queue",
  "tenant_account", "api_key", "admin_key", "agent"];
const pageSize = 100;

// The pages an entry's resource has in the console.
const pages: Record<string, string> = { task: "#/tasks/", task_group: "#/groups/", job: "#/pipeline/" };

// details shows an entry's details, a JSON object, as its fields one a
// line ("reason: not needed"); anything else as it is.
function details(raw: string): HTMLElement | string {
  if (!raw || raw === "{}") return "";
  let obj: unknown;
  try {
    obj = JSON.parse(raw);
  } catch {
    return h("code", {}, raw);
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return h("code", {}, raw);
  return h(
    "ul",
    { className: "details" },
    ...Object.entries(obj).map(([k, v]) => h("li", {}, h("span", { className: "muted" }, `${k}: `), typeof v === "string" ? v : JSON.stringify(v))),
  );
}

export function auditPage(main: HTMLElement, query: URLSearchParams): void {
  const resource = h("select", { name: "resource" }, ...resources.map((r) => h("option", { value: r }, r || "any")));
  const action = h("input", { type: "text", name: "action", autocomplete: "off", spellcheck: false });
  const resourceID = h("input", { type: "text", name: "resource_id", autocomplete: "off", spellcheck: false });
  resource.value = resources.includes(query.get("resource") ?? "") ? (query.get("resource") ?? "") : "";
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
    h("div", {}, h("button", { type: "submit" }, "Show")),
  );
  let shown = { filters: new URLSearchParams(), count: 0, next: "" };
  const row = (e: any) => {
    const page = pages[e.resource];
    const id = e.resource_id ? (page ? h("a", { href: page + encodeURIComponent(e.resource_id) }, e.resource_id) : h("code", {}, e.resource_id)) : "";
    // task.cancelled may break after its dot, not inside a word.
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
      h("td", { "data-label": "Details" }, details(e.details)),
    );
  };
  const load = pagedList(filters, more, msg, async (fresh: boolean) => {
    if (fresh) {
      const f = new URLSearchParams();
      if (resource.value) f.set("resource", resource.value);
      if (action.value.trim()) f.set("action", action.value.trim());
      if (resourceID.value.trim()) f.set("resource_id", resourceID.value.trim());
      shown = { filters: f, count: 0, next: "" };
      // The address says what is shown, without reading it again.
      const q = f.toString();
      history.replaceState(null, "", q ? `#/audit?${q}` : "#/audit");
    }
    const q = new URLSearchParams(shown.filters);
    q.set("page_size", String(pageSize));
    if (shown.next) q.set("page_token", shown.next);
    const r = await call("GET", `/api/v1/audit-logs?${q}`);
    const entries: any[] = r.audit_logs ?? [];
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
  main.append(h("h1", {}, "Audit log"), filters, msg, h("div", { className: "card table-wrap" }, table, more));
  void load(true);
}
