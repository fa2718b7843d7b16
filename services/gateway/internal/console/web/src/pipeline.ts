// The pipeline page: upload a model and its quantization archive, start a
// job, look a job up by its id, follow its stages live (SSE, polling every
// 4 s while the stream is down), and download its results and logs.

import { APIError, call, describe, stream, upload } from "./api";
import { field, h, say } from "./dom";

const jobsKey = "taskmesh.jobs";
const pollEvery = 4000;
const stages = ["ONNX", "BIE", "NEF"];

// What a user is told of a job the system does not know, in the words of
// the pipeline's design ("the system restarted, please submit it again"),
// then in English.
const restarted = "系統已重啟,請重新送出";

function savedJobs(): string[] {
  try {
    return JSON.parse(sessionStorage.getItem(jobsKey) ?? "[]");
  } catch {
    return [];
  }
}

function saveJobs(ids: string[]): void {
  sessionStorage.setItem(jobsKey, JSON.stringify(ids));
}

// pipelinePage shows the page; with selected (#/pipeline/{job_id}), that
// job is looked up as the "Look up a job" form does.
export function pipelinePage(main: HTMLElement, signal: AbortSignal, selected?: string): void {
  const model = h("input", { type: "file", required: true, accept: ".onnx", name: "model" });
  const quant = h("input", { type: "file", required: true, accept: ".zip", name: "quant" });
  const refs = h("input", { type: "file", multiple: true, accept: "image/*", name: "ref_images" });
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "submit-status" });
  const submit = h("button", { type: "submit", id: "submit-job" }, "Upload and convert");
  const jobs = h("div", { id: "jobs" });
  const form = h(
    "form",
    { className: "card", "aria-labelledby": "new-job" },
    h("h2", { id: "new-job" }, "New conversion"),
    field("Model (ONNX)", model),
    field("Quantization archive (quant.zip)", quant),
    field("Reference images (optional)", refs),
    submit,
    msg,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const m = model.files?.[0];
    const q = quant.files?.[0];
    if (!m || !q) {
      say(msg, "Choose a model and a quantization archive.", true);
      return;
    }
    submit.disabled = true;
    try {
      say(msg, "Uploading the model…");
      const modelKey = await upload("model", m);
      say(msg, "Uploading the quantization archive…");
      const quantKey = await upload("quant", q);
      const refKeys: string[] = [];
      for (const f of Array.from(refs.files ?? [])) {
        say(msg, `Uploading ${f.name}…`);
        refKeys.push(await upload("ref_image", f));
      }
      const job = await call("POST", "/jobs", { model_key: modelKey, quant_key: quantKey, ref_image_keys: refKeys });
      say(msg, `Job ${job.job_id} started.`);
      saveJobs([job.job_id, ...savedJobs()]);
      jobs.prepend(jobCard(job.job_id, signal));
      form.reset();
    } catch (err) {
      say(msg, describe(err), true);
    } finally {
      submit.disabled = false;
    }
  });
  // Looking a job up by its id: a job started elsewhere (another tab,
  // another client of the API) or before the tab was closed.
  const jobID = h("input", { type: "text", required: true, name: "job_id", id: "job-id", autocomplete: "off",
    placeholder: "00000000-0000-4000-8000-000000000000", spellcheck: false });
  const findMsg = h("p", { className: "msg", role: "status", "aria-live": "polite", id: "find-status" });
  const find = h(
    "form",
    { className: "card", "aria-labelledby": "find-job" },
    h("h2", { id: "find-job" }, "Look up a job"),
    field("Job id", jobID),
    h("button", { type: "submit", id: "find-job-submit" }, "Show job"),
    findMsg,
  );
  const lookUp = async (id: string) => {
    const shown = jobs.querySelector(`[data-job="${CSS.escape(id)}"]`);
    if (shown) {
      say(findMsg, `Job ${id} is shown below.`);
      shown.scrollIntoView();
      return;
    }
    try {
      const job = await call("GET", `/jobs/${encodeURIComponent(id)}`);
      say(findMsg, "");
      saveJobs([job.job_id, ...savedJobs()]);
      jobs.prepend(jobCard(job.job_id, signal));
      find.reset();
    } catch (err) {
      if (err instanceof APIError && err.code === "JOB_NOT_FOUND") {
        say(findMsg, `${restarted} — no job ${id} is known: the system may have restarted. Please submit it again.`, true);
      } else {
        say(findMsg, describe(err), true);
      }
    }
  };
  find.addEventListener("submit", (e) => {
    e.preventDefault();
    const id = jobIDOf(jobID.value);
    if (id) void lookUp(id);
  });
  main.append(h("h1", {}, "Model conversion"), form, find, h("h2", {}, "Jobs"), jobs);
  for (const id of savedJobs()) jobs.append(jobCard(id, signal));
  if (selected) {
    let id = "";
    try {
      id = jobIDOf(decodeURIComponent(selected));
    } catch {
      // A link cut or mangled in transit (a broken %-escape).
    }
    if (id) void lookUp(id);
    else say(findMsg, "This link does not hold a job id: paste the id in the form above.", true);
  }
}

// jobIDOf is a job id as typed or linked: job ids are UUIDs, which the
// server writes in lower case, so one pasted in upper case or with spaces
// around it is the same job.
function jobIDOf(text: string): string {
  return text.trim().toLowerCase();
}

// jobCard shows one job and keeps it current until it is final.
function jobCard(id: string, signal: AbortSignal): HTMLElement {
  const status = h("span", { className: "status", "data-job-status": "" }, "…");
  const live = h("p", { className: "msg", role: "status", "aria-live": "polite", "data-job-live": "" });
  const bars = stages.map((s) => {
    const p = h("progress", { max: 100, value: 0, "aria-label": `${s} stage progress` });
    const pct = h("span", {}, "0%");
    return { s, p, pct, row: h("div", { className: "stage" }, h("span", {}, s), p, pct) };
  });
  const downloads = h("div", { className: "downloads" });
  const error = h("p", { className: "error", role: "alert" });
  const card = h(
    "section",
    { className: "card", "data-job": id, "aria-label": `Job ${id}` },
    h("h3", {}, "Job ", h("a", { href: `#/pipeline/${encodeURIComponent(id)}` }, h("code", {}, id)), " — ", status),
    ...bars.map((b) => b.row),
    error,
    downloads,
    live,
  );

  let version = "";
  let final = false;
  const show = (job: any) => {
    status.textContent = job.status;
    status.className = "status " + job.status;
    const cur = stages.indexOf(job.stage);
    bars.forEach((b, i) => {
      let v = 0;
      if (job.status === "COMPLETED" || i < cur) v = 100;
      else if (i === cur) v = job.progress ?? 0;
      b.p.value = v;
      b.pct.textContent = `${v}%`;
    });
    // A failed job is not retried: its user is asked to submit it again
    // (docs/console.md).
    if (job.error) {
      const reason = String(job.error.reason ?? "").replace(/\.$/, "");
      error.textContent = `The ${job.error.step} stage failed: ${reason}. Please submit the job again.`;
    }
    final = job.status === "COMPLETED" || job.status === "FAILED";
    if (final) void showDownloads(id, downloads);
  };
  const gone = () => {
    final = true;
    status.textContent = "unknown";
    error.textContent = `${restarted} — This job is not known any more: the system restarted. Please submit it again.`;
    saveJobs(savedJobs().filter((j) => j !== id));
  };

  // follow streams the job; when the stream drops it polls every 4 s
  // and tries the stream again after each poll.
  const follow = async () => {
    while (!final && !signal.aborted) {
      try {
        say(live, "Live.");
        await stream(`/jobs/${id}/events`, version, (f) => {
          version = f.id;
          show(f.data);
        }, signal);
        if (final) break;
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof APIError && err.code === "JOB_NOT_FOUND") return gone();
        say(live, "Live updates interrupted; checking every 4 seconds.");
      }
      await new Promise((r) => setTimeout(r, pollEvery));
      if (signal.aborted) return;
      try {
        const job = await call("GET", `/jobs/${id}`);
        show(job);
      } catch (err) {
        if (err instanceof APIError && err.code === "JOB_NOT_FOUND") return gone();
      }
    }
    say(live, "");
  };
  void follow();
  return card;
}

async function showDownloads(id: string, into: HTMLElement): Promise<void> {
  try {
    const d = await call("GET", `/jobs/${id}/downloads`);
    const links: HTMLElement[] = [];
    const add = (url: string | null, label: string, file: string, testid: string) => {
      if (url) links.push(h("a", { href: url, download: file, "data-download": testid }, label));
    };
    add(d.bie_url, "Download BIE", "result.bie", "bie");
    add(d.nef_url, "Download NEF", "result.nef", "nef");
    for (const s of ["onnx", "bie", "nef"]) add(d.logs?.[s], `${s.toUpperCase()} log`, `${s}.log`, `${s}-log`);
    into.replaceChildren(...links);
  } catch (err) {
    into.replaceChildren(h("span", { className: "error" }, describe(err)));
  }
}
