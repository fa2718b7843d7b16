// A small helper to build DOM trees without a framework.

type Child = Node | string | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Record<string, any> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k in el && !k.includes("-") && k !== "list") (el as any)[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(c));
  }
  return el;
}

let ids = 0;

// uid returns a fresh element id (labels point at inputs by id).
export function uid(prefix: string): string {
  ids++;
  return `${prefix}-${ids}`;
}

// field is a labelled control; a hint under it is read out with it
// (aria-describedby).
export function field(label: string, control: HTMLElement, hint?: string): HTMLElement {
  if (!control.id) control.id = uid("f");
  if (!hint) return h("div", {}, h("label", { htmlFor: control.id }, label), control);
  const note = h("small", { className: "hint", id: uid("hint") }, hint);
  control.setAttribute("aria-describedby", note.id);
  return h("div", {}, h("label", { htmlFor: control.id }, label), control, note);
}

// when shows a timestamp of the API in the reader's time zone, as a
// <time> that keeps the exact value; nothing for an empty one.
export function when(ts: string | null | undefined): HTMLElement | string {
  if (!ts) return "";
  const d = new Date(ts);
  return isNaN(d.getTime()) ? ts : h("time", { dateTime: ts }, d.toLocaleString());
}

// idFromRoute reads the id part of a hash route (#/groups/{id}): the
// address holds it percent-encoded, and a mangled one is no id at all.
// Nor is one that cannot be a single path segment of an API call ("/",
// "." or ".."): the browser would resolve it into another route.
export function idFromRoute(arg: string): string | null {
  let id: string;
  try {
    id = decodeURIComponent(arg).trim();
  } catch {
    return null;
  }
  return id === "" || id === "." || id === ".." || id.includes("/") ? null : id;
}

export function say(el: HTMLElement, text: string, error = false): void {
  el.textContent = text;
  el.classList.toggle("error", error);
}
