// The Taskmesh web console: sign in with an API key (kept in session
// storage), then the pipeline, tasks, task groups, audit, usage and video
// pages, each a hash route.

import { apiKey, call, describe, setAPIKey } from "./api";
import { auditPage } from "./audit";
import { field, h, say } from "./dom";
import { groupsPage } from "./groups";
import { newTaskPage } from "./newtask";
import { pipelinePage } from "./pipeline";
import { tasksPage } from "./tasks";
import { usagePage } from "./usage";
import { videoPage } from "./video";

const main = document.getElementById("main") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
let current: AbortController | null = null;

function signIn(): void {
  const key = h("input", { type: "password", name: "api-key", autocomplete: "off", required: true, id: "api-key" });
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite" });
  const form = h(
    "form",
    { className: "card", "aria-label": "Sign in" },
    h("p", {}, "Sign in with a tenant's API key. It is kept in this tab only."),
    field("API key", key),
    h("button", { type: "submit", id: "sign-in" }, "Sign in"),
    msg,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const value = key.value.trim();
    // A key is printable ASCII (tm_<prefix>_<secret>); anything else could
    // not even be sent as a header, and the browser's error says nothing.
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

// notFound answers an address the console has no page for (a mistyped
// or outdated link) instead of showing another page in its place.
function notFound(main: HTMLElement): void {
  const links = [...nav.querySelectorAll("a")].map((a) => h("a", { href: a.getAttribute("href") ?? "#/" }, a.textContent ?? ""));
  const list: (Node | string)[] = [];
  links.forEach((a, i) => list.push(i === 0 ? "" : i === links.length - 1 ? " or " : ", ", a));
  main.append(h("h1", {}, "No such page"), h("p", { className: "card" }, "The console has no page at this address. Go to ", ...list, "."));
}

function route(): void {
  current?.abort();
  current = new AbortController();
  main.replaceChildren();
  // #/page/arg?query: the query is the page's own (the audit filters).
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
    case undefined:
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
