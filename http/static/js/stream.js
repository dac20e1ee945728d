// POST /v1/chat/completions with stream: true and hand each parsed SSE chunk to `onChunk`.

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export async function streamChat(body, headers, signal, onChunk) {
  const resp = await fetch("v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify({ ...body, stream: true }),
    signal,
  });
  if (!resp.ok) {
    const j = await resp.json().catch(() => ({}));
    throw new ApiError((j.error && j.error.message) || `${resp.status} ${resp.statusText}`, resp.status);
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data || data === "[DONE]") continue;
      const j = JSON.parse(data);
      if (j.error) throw new ApiError(j.error.message || String(j.error), j.error.code || 500);
      onChunk(j);
    }
  }
}

// Fold a chunk's delta into `msg` (content, reasoning_content, tool_calls by index).
export function applyDelta(msg, chunk) {
  const choice = chunk.choices && chunk.choices[0];
  const delta = (choice && choice.delta) || {};
  let n = 0;
  if (typeof delta.content === "string" && delta.content) { msg.content += delta.content; n += 1; }
  if (typeof delta.reasoning_content === "string" && delta.reasoning_content) {
    msg.reasoning = (msg.reasoning || "") + delta.reasoning_content;
    n += 1;
  }
  if (Array.isArray(delta.tool_calls)) {
    msg.toolCalls = msg.toolCalls || [];
    for (const tc of delta.tool_calls) {
      const i = typeof tc.index === "number" ? tc.index : msg.toolCalls.length;
      const cur = msg.toolCalls[i] || (msg.toolCalls[i] = { id: "", name: "", arguments: "" });
      if (tc.id) cur.id = tc.id;
      if (tc.function && tc.function.name) cur.name += tc.function.name;
      if (tc.function && tc.function.arguments) cur.arguments += tc.function.arguments;
    }
    n += 1;
  }
  if (choice && choice.finish_reason) msg.finishReason = choice.finish_reason;
  return n;
}
