// The console's only way to the server: the public /v1 API with the signed-in API key.
// The key lives in this tab's sessionStorage: closing the tab forgets it.

const KEY_NAME = "corral.apiKey";

export function apiKey() {
  return sessionStorage.getItem(KEY_NAME);
}

export function signIn(key) {
  sessionStorage.setItem(KEY_NAME, key);
}

export function signOut() {
  sessionStorage.removeItem(KEY_NAME);
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function url(path, query) {
  const u = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value === undefined || value === null || value === "") continue;
    if (Array.isArray(value)) value.forEach((v) => u.searchParams.append(name, v));
    else u.searchParams.set(name, String(value));
  }
  return u;
}

function headers(extra) {
  return { "x-api-key": apiKey() || "", "anthropic-version": "2023-06-01", ...extra };
}

async function failure(resp) {
  let message = `${resp.status} ${resp.statusText}`;
  try {
    const body = await resp.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(resp.status, message);
}

/** A JSON request; throws ApiError with the server's message on a non-2xx answer. */
export async function request(path, { method = "GET", query, body, signal } = {}) {
  const init = { method, headers: headers(), signal };
  if (body !== undefined) {
    init.headers = headers({ "content-type": "application/json" });
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(url(path, query), init);
  if (!resp.ok) throw await failure(resp);
  return resp.json();
}

/** Every item of a paginated list (following `next_page`), up to `max`, `pageSize` a request. */
export async function listAll(path, query = {}, max = 1000, pageSize = 100) {
  const items = [];
  let page;
  do {
    const limit = Math.min(pageSize, max - items.length);
    const body = await request(path, { query: { ...query, limit, page } });
    items.push(...body.data);
    page = body.next_page;
  } while (page && items.length < max);
  return items;
}

/** A file's bytes as a Blob (downloads need the key header too). */
export async function download(path) {
  const resp = await fetch(url(path), { headers: headers() });
  if (!resp.ok) throw await failure(resp);
  return resp.blob();
}

/**
 * Open an SSE stream with the key header (EventSource cannot send headers, so this reads
 * the response body of a fetch). Resolves once the server answered; then `onEvent(type,
 * data)` is called per frame until the stream ends or `signal` aborts; returns a promise
 * that settles then.
 */
export async function openStream(path, { signal, onEvent }) {
  const resp = await fetch(url(path), {
    headers: headers({ accept: "text/event-stream" }),
    signal,
    cache: "no-store",
  });
  if (!resp.ok) throw await failure(resp);
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  const pump = async () => {
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let type = "message";
        const data = [];
        for (const line of frame.split("\n")) {
          if (line.startsWith("event:")) type = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length === 0) continue;
        try {
          onEvent(type, JSON.parse(data.join("\n")));
        } catch (err) {
          console.error("bad SSE frame", err);
        }
      }
    }
  };
  return { done: pump() };
}
