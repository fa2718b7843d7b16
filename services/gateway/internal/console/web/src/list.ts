// What the list pages (tasks, groups, audit) share: a filter form that
// reads the first page again, "Show more" that reads the next, one read
// at a time, and a table of rows under a caption.

import { describe } from "./api";
import { h, say } from "./dom";

// pagedList wires filters and more to read(fresh): submitting the form
// reads a first page (fresh), a click on more the next one. A read asked
// for while one runs is dropped; a failed read is said in msg. It
// returns the loader, for the page's first read.
export function pagedList(
  filters: HTMLElement,
  more: HTMLButtonElement,
  msg: HTMLElement,
  read: (fresh: boolean) => Promise<void>,
): (fresh: boolean) => Promise<void> {
  let busy = false;
  const load = async (fresh: boolean) => {
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

// listTable is a table of body's rows with a caption and column heads.
export function listTable(className: string, caption: string, columns: string[], body: HTMLElement): HTMLElement {
  return h(
    "table",
    className ? { className } : {},
    h("caption", { className: "msg" }, caption),
    h("thead", {}, h("tr", {}, ...columns.map((c) => h("th", { scope: "col" }, c)))),
    body,
  );
}
