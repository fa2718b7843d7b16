// The console's calls to the gateway: REST with the API key kept in
// session storage, Server-Sent Events read through fetch (EventSource
// cannot send an Authorization header), and WebSockets that carry the key
// as their second subprotocol (browsers cannot set headers on them).

const keyName = "taskmesh.apiKey";

export function apiKey(): string | null {
  return sessionStorage.getItem(keyName);
}

export function setAPIKey(key: string | null): void {
  if (key === null) sessionStorage.removeItem(keyName);
  else sessionStorage.setItem(keyName, key);
}

export class APIError extends Error {
  constructor(public status: number, public code: string, message: string) {
    super(message);
  }
}

function headers(extra?: Record<string, string>): Record<string, string> {
  return { Authorization: "Bearer " + (apiKey() ?? ""), ...(extra ?? {}) };
}

async function failure(resp: Response): Promise<APIError> {
  let code = String(resp.status);
  let message = resp.statusText;
  try {
    const body = await resp.json();
    code = String(body.code ?? code);
    message = body.message ?? message;
  } catch {
    // not JSON: keep the status line
  }
  return new APIError(resp.status, code, message);
}

// describe words an error for the page: the API's code and message, or,
// when fetch itself failed (the server unreachable), a sentence saying so
// instead of the browser's "TypeError: Failed to fetch".
export function describe(err: unknown): string {
  if (err instanceof APIError) return `${err.code}: ${err.message}`;
  if (err instanceof TypeError && /fetch/i.test(err.message)) {
    return "Taskmesh could not be reached; check the connection and try again.";
  }
  return err instanceof Error ? err.message : String(err);
}

// call sends a JSON request and returns the decoded answer.
export async function call<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, headers: headers(body === undefined ? undefined : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const resp = await fetch(path, init);
  if (!resp.ok) throw await failure(resp);
  return (await resp.json()) as T;
}

// upload posts one file as a pipeline input and returns its key.
export async function upload(kind: string, file: File): Promise<string> {
  const form = new FormData();
  form.append("kind", kind); // before the file: the gateway streams it
  form.append("file", file, file.name);
  const resp = await fetch("/jobs/uploads", { method: "POST", headers: headers(), body: form });
  if (!resp.ok) throw await failure(resp);
  return (await resp.json()).key;
}

export interface Frame {
  id: string;
  event: string;
  data: any;
}

// stream reads an SSE route until it ends; onFrame sees each frame. It
// resolves when the server ends the stream (after the final frame, or 204
// when the client has it) and rejects when the connection drops or is
// refused: the caller falls back to polling and reconnects with lastID.
export async function stream(path: string, lastID: string, onFrame: (f: Frame) => void, signal: AbortSignal): Promise<void> {
  const h = headers({ Accept: "text/event-stream" });
  if (lastID) h["Last-Event-ID"] = lastID;
  const resp = await fetch(path, { headers: h, signal });
  if (resp.status === 204) return;
  if (!resp.ok || !resp.body) throw await failure(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let cur: Frame = { id: "", event: "", data: null };
  let closed = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (cur.event === "close") closed = true;
        else if (cur.event) onFrame(cur);
        cur = { id: "", event: "", data: null };
      } else if (line.startsWith("id: ")) cur.id = line.slice(4);
      else if (line.startsWith("event: ")) cur.event = line.slice(7);
      else if (line.startsWith("data: ")) cur.data = JSON.parse(line.slice(6));
    }
  }
  if (closed) throw new APIError(0, "closed", "the stream was closed early");
}

// socket opens a live WebSocket route with the API key.
export function socket(path: string): WebSocket {
  const url = new URL(path, location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return new WebSocket(url.toString(), ["taskmesh.bearer", apiKey() ?? ""]);
}
