// The Taskmesh web console: sign in with an API key (kept in session
// storage), then the pipeline, tasks and video pages, each a hash route.

import { APIError, apiKey, call, setAPIKey } from "./api";
import { field, h, say } from "./dom";
import { pipelinePage } from "./pipeline";
import { tasksPage } from "./tasks";
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
    setAPIKey(key.value.trim());
    try {
      await call("GET", "/api/v1/tasks?page_size=1");
      location.hash = "#/pipeline";
    } catch (err) {
      setAPIKey(null);
      say(msg, err instanceof APIError ? `${err.code}: ${err.message}` : String(err), true);
    }
  });
  main.append(h("h1", {}, "Taskmesh console"), form);
  key.focus();
}

function route(): void {
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
    default:
      pipelinePage(main, current.signal);
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
