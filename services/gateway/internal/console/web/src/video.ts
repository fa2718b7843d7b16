// The video page: a text-to-video or image-to-video generation, its
// progress over the WebSocket (polling every 4 s while the socket is
// down), and the finished MP4 playing in the page.

import { call, describe, socket } from "./api";
import { field, h, say } from "./dom";

const pollEvery = 4000;
// A generation in one of these statuses changes no more.
const finalStatuses = ["SUCCEEDED", "FAILED", "CANCELED", "UNKNOWN"];

export function videoPage(main: HTMLElement, signal: AbortSignal): void {
  const model = h(
    "select",
    { name: "model" },
    h("option", { value: "wan2.2-t2v" }, "Text to video (wan2.2-t2v)"),
    h("option", { value: "wan2.2-i2v" }, "Image to video (wan2.2-i2v)"),
  );
  const prompt = h("textarea", { name: "prompt", required: true, maxLength: 800 });
  const image = h("input", { type: "file", accept: "image/jpeg,image/png,image/bmp,image/webp", name: "image" });
  const resolution = h("select", { name: "resolution" }, ...["480P", "720P", "1080P"].map((r) => h("option", { value: r }, r)));
  const submit = h("button", { type: "submit", id: "generate" }, "Generate");
  const msg = h("p", { className: "msg", role: "status", "aria-live": "polite" });
  const progress = h("progress", { max: 100, value: 0, "aria-label": "Generation progress", id: "video-progress" });
  const status = h("span", { className: "status", "data-video-status": "" });
  const player = h("div", { id: "player" });
  const form = h(
    "form",
    { className: "card", "aria-label": "New video" },
    field("Model", model),
    field("Prompt", prompt),
    field("First frame (image to video)", image),
    field("Resolution", resolution),
    submit,
    msg,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    submit.disabled = true;
    // The previous generation's status, progress and video go: what shows
    // is the new one's (or why it was refused).
    player.replaceChildren();
    progress.value = 0;
    status.textContent = "";
    status.className = "status";
    say(msg, "");
    try {
      const input: Record<string, string> = { prompt: prompt.value };
      const file = image.files?.[0];
      if (model.value === "wan2.2-i2v") {
        if (!file) throw new Error("Image to video needs a first frame.");
        input.image = await dataURL(file);
      }
      const r = await call("POST", "/v1/video/generations", { model: model.value, input, parameters: { resolution: resolution.value } });
      say(msg, `Generation ${r.output.task_id} queued.`);
      follow(r.output.task_id);
    } catch (err) {
      say(msg, describe(err), true);
      submit.disabled = false;
    }
  });
  // follow shows the generation over the WebSocket; when the socket
  // closes before the final frame it polls every 4 s and tries the socket
  // again after each poll.
  const follow = (id: string) => {
    let final = false;
    let played = false;
    const show = (d: any) => {
      progress.value = d.taskProgress ?? 0;
      status.textContent = d.task_status;
      status.className = "status " + d.task_status;
      if (!finalStatuses.includes(d.task_status)) return;
      final = true;
      submit.disabled = false;
      if (d.task_status === "FAILED") say(msg, d.message || "The generation failed.", true);
      else if (d.task_status !== "SUCCEEDED") say(msg, `The generation is ${d.task_status}.`, true);
      else if (!played) {
        played = true;
        void play(id);
      }
    };
    const live = () => {
      const ws = socket(`/v1/video/generations/${id}/ws`);
      const stop = () => ws.close();
      signal.addEventListener("abort", stop);
      ws.onmessage = (ev) => show(JSON.parse(ev.data).data);
      ws.onclose = () => {
        signal.removeEventListener("abort", stop);
        if (final || signal.aborted) return;
        say(msg, "Live updates interrupted; checking every 4 seconds.");
        void poll();
      };
    };
    const poll = async () => {
      await new Promise((r) => setTimeout(r, pollEvery));
      if (signal.aborted) return;
      try {
        show((await call("GET", `/v1/video/generations/${id}`)).data);
      } catch {
        // Unreachable too: the socket is tried again, then the next poll.
      }
      if (!final && !signal.aborted) live();
    };
    live();
  };
  const play = async (id: string) => {
    const g = await call("GET", `/v1/video/generations/${id}`);
    const url = g.data?.taskInput?.video_url;
    if (!url) {
      say(msg, "The generation succeeded but has no video link.", true);
      return;
    }
    progress.value = 100;
    say(msg, "Done.");
    player.replaceChildren(h("video", { src: url, controls: true, autoplay: true, muted: true, playsInline: true, id: "video" }));
  };
  main.append(
    h("h1", {}, "Video generation"),
    form,
    h("section", { className: "card", "aria-label": "Progress" }, h("p", {}, "Status: ", status), progress, player),
  );
}

function dataURL(file: File): Promise<string> {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });
}
