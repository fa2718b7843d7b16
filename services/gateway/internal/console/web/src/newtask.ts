// The new-task form (#/tasks/new): a task's spec field by field, sent to
// POST /api/v1/tasks. Created, the page moves to the task's own page; a
// refusal shows the server's code and message and leaves the form as it
// was, the field it names marked.

import { APIError, call, describe } from "./api";
import { field, h, say } from "./dom";

// The types a client creates here; video tasks come from the video API.
const types = ["shell", "python", "script", "noop"];

// lines splits a text area into its lines, blank ones left out.
function lines(text: string): string[] {
  return text.split(/\r?\n/).filter((l) => l.trim() !== "");
}

// parseEnv reads KEY=VALUE lines; it throws, naming the line, on one that
// is not.
function parseEnv(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  text.split(/\r?\n/).forEach((line, i) => {
    if (line.trim() === "") return;
    const eq = line.indexOf("=");
    const key = eq < 0 ? "" : line.slice(0, eq).trim();
    if (!key) throw new Error(`Environment line ${i + 1} is not KEY=VALUE.`);
    if (key in env) throw new Error(`Environment variable ${key} is given twice.`);
    env[key] = line.slice(eq + 1);
  });
  return env;
}

export function newTaskPage(main: HTMLElement): void {
  const name = h("input", { type: "text", name: "name", required: true, autocomplete: "off" });
  const type = h("select", { name: "type" }, ...types.map((t) => h("option", { value: t }, t)));
  const command = h("textarea", { name: "command", rows: 2, spellcheck: false });
  const args = h("textarea", { name: "args", rows: 3, spellcheck: false });
  const workdir = h("input", { type: "text", name: "workdir", autocomplete: "off", spellcheck: false });
  const env = h("textarea", { name: "env", rows: 3, spellcheck: false });
  const number = (n: string, min: number, max: number, placeholder: string) =>
    h("input", { type: "number", name: n, min, max, step: 1, placeholder, inputMode: "numeric" });
  const priority = number("priority", 1, 10, "5");
  const timeout = number("timeout", 1, 604800, "3600");
  const retries = number("max_retries", 0, 100, "3");
  const submit = h("button", { type: "submit", id: "create-task" }, "Create task");
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "create-status" });
  const controls: Record<string, HTMLElement> = { name, type, command, args, workdir, env, priority, timeout, max_retries: retries };
  const form = h(
    "form",
    { className: "card", "aria-labelledby": "new-task" },
    h("h2", { id: "new-task" }, "Task"),
    field("Name", name),
    field("Type", type, "shell and python run the command directly (no shell); script runs it as a /bin/sh script; noop runs nothing."),
    field("Command", command, "Without arguments below, a whole command line: its words are split as a shell would, nothing is expanded."),
    field("Arguments", args, "One per line; blank lines are left out."),
    field("Working directory", workdir, "An absolute path; empty: a directory of its own on the agent."),
    field("Environment", env, "KEY=VALUE, one per line."),
    h(
      "div",
      { className: "row" },
      field("Priority", priority, "1 (highest) to 10; empty: 5."),
      field("Timeout (seconds)", timeout, "Empty: 3600."),
      field("Retries", retries, "0 to 100; empty: 3."),
    ),
    h("div", { className: "buttons" }, submit, h("a", { href: "#/tasks" }, "Back to the tasks")),
    msg,
  );
  const clearMarks = () => {
    for (const c of Object.values(controls)) c.removeAttribute("aria-invalid");
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    clearMarks();
    let body: Record<string, unknown>;
    try {
      body = { name: name.value, type: type.value };
      if (command.value.trim() !== "") body.command = command.value;
      const a = lines(args.value);
      if (a.length) body.args = a;
      if (workdir.value.trim() !== "") body.workdir = workdir.value.trim();
      const vars = parseEnv(env.value);
      if (Object.keys(vars).length) body.env = vars;
      for (const [key, input] of [["priority", priority], ["timeout", timeout], ["max_retries", retries]] as const) {
        if (input.value !== "") body[key] = Number(input.value);
      }
    } catch (err) {
      env.setAttribute("aria-invalid", "true");
      say(msg, describe(err), true);
      env.focus();
      return;
    }
    submit.disabled = true;
    say(msg, "Creating the task…");
    try {
      const t = await call("POST", "/api/v1/tasks", body);
      location.hash = `#/tasks/${encodeURIComponent(t.id)}`;
    } catch (err) {
      say(msg, `The task was not created. ${describe(err)}`, true);
      // The message names the field it refuses ("workdir: must be …",
      // "validation error: priority: …"): mark that one.
      if (err instanceof APIError) {
        const named = /(?:^|[\s:])(name|type|command|args|workdir|env|priority|timeout|max_retries)\b(?:\[[^\]]*\])?:/.exec(err.message);
        const control = named ? controls[named[1]] : undefined;
        if (control) {
          control.setAttribute("aria-invalid", "true");
          control.focus();
        }
      }
    } finally {
      submit.disabled = false;
    }
  });
  main.append(h("h1", {}, "New task"), form);
}
