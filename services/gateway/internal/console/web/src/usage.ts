// The usage page (#/usage): the tenant's metered usage over a range of
// days, grouped by day, model, queue, flavor or pipeline stage, priced,
// as a table with its total.

import { call, describe } from "./api";
import { field, h, say } from "./dom";

const groupings = ["day", "model", "queue", "flavor", "stage", "tenant"];

// utcDay is a date as YYYY-MM-DD in UTC, as the API reads days.
function utcDay(d: Date): string {
  return d.toISOString().slice(0, 10);
}

// utcTime shows a time of the answer as the UTC minute it is: the range
// was chosen in UTC days.
function utcTime(ts: unknown): string {
  const d = new Date(String(ts));
  return isNaN(d.getTime()) ? String(ts ?? "") : `${d.toISOString().slice(0, 16).replace("T", " ")} UTC`;
}

// amount shows money to the cent, and the fractions of a cent a few
// seconds cost.
function amount(v: unknown): string {
  return Number(v ?? 0).toLocaleString(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 6 });
}

// seconds shows a quantity of seconds (a double) to the tenth.
function seconds(v: unknown): string {
  const n = Number(v ?? 0);
  return n.toLocaleString(undefined, { maximumFractionDigits: 1 });
}

export function usagePage(main: HTMLElement): void {
  const today = new Date();
  const from = h("input", { type: "date", name: "from", required: true,
    value: utcDay(new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), 1))) });
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
    h("div", {}, h("button", { type: "submit", id: "usage-show" }, "Show")),
  );
  const cells = (r: any, currency: string) => [
    h("td", {}, seconds(r.gpu_seconds)),
    h("td", {}, seconds(r.cpu_seconds)),
    h("td", {}, seconds(r.video_seconds)),
    h("td", {}, seconds(r.stage_seconds)),
    h("td", {}, String(r.items ?? 0)),
    h("td", {}, `${amount(r.amount)} ${currency}`),
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
      const rows: any[] = r.rows ?? [];
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
    foot,
  );
  main.append(h("h1", {}, "Usage"), form, msg, h("div", { className: "card table-wrap" }, table));
  void load();
}
