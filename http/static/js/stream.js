// POST /v1/chat/completions with stream: true and hand each parsed chunk to `onChunk`.
import { request, sseEvents } from "./api.js";

export async function streamChat(body, signal, onChunk) {
  const resp = await request("v1/chat/completions", { method: "POST", body: { ...body, stream: true }, signal });
  for await (const chunk of sseEvents(resp)) onChunk(chunk);
}

// Fold a chunk into `msg`: its delta (content, reasoning_content, tool_calls by index), the
// finish reason, and llama-server's prompt_progress (return_progress). Returns the number of
// generated pieces the chunk carried.
export function applyDelta(msg, chunk) {
  const choice = chunk.choices && chunk.choices[0];
  const delta = (choice && choice.delta) || {};
  let n = 0;
  if (chunk.prompt_progress) msg.progress = chunk.prompt_progress;
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
