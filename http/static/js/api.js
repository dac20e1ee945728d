// The server's API as the page calls it: the API key, JSON requests, and SSE streams.
// Every path is relative (no leading slash), so the page also works under a path prefix.

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

let apiKey = "";

export function setApiKey(key) {
  apiKey = key || "";
}

export function authHeaders() {
  return apiKey ? { Authorization: "Bearer " + apiKey } : {};
}

// fetch() with the key; a non-2xx answer becomes an ApiError carrying the server's message.
export async function request(path, { method = "GET", body, headers = {}, signal } = {}) {
  const init = { method, headers: { ...authHeaders(), ...headers }, signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(path, init);
  if (!resp.ok) {
    const j = await resp.json().catch(() => ({}));
    throw new ApiError((j.error && j.error.message) || `${resp.status} ${resp.statusText}`, resp.status);
  }
  return resp;
}

export async function getJSON(path, signal) {
  return (await request(path, { signal })).json();
}

export async function postJSON(path, body, signal) {
  return (await request(path, { method: "POST", body, signal })).json();
}

// The JSON payload of each SSE `data:` message of a response, in order ([DONE] ends it);
// an in-stream {"error": ...} is thrown as an ApiError.
export async function* sseEvents(resp) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      const j = JSON.parse(data);
      if (j.error && !("done" in j)) throw new ApiError(j.error.message || String(j.error), j.error.code || 500);
      yield j;
    }
  }
}
