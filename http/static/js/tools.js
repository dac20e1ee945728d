// The server's tools (llama-server's /tools API: `llama serve --tools ...`, -ag, MCP servers)
// and running the model's tool calls with them.
//
// GET /tools lists them ({tool, display_name, type, permissions: {write}, definition}); a
// server without tools answers 403, and the page then offers none. The enabled ones go in each
// chat request's `tools`. A call runs through POST /tools {tool, params}; exec_shell_command
// streams its output (stream: true, `data: {"chunk"}` ... `data: {"done"}`). Its result for the
// model is the plain_text_response, else the JSON answer ({"error": ...} when it failed).
import { getJSON, request, sseEvents } from "./api.js";

export const DECLINED = "the user declined to run this tool";
export const STOPPED = "stopped by the user";
const STREAMED = new Set(["exec_shell_command"]);

export class Tools {
  constructor() {
    this.list = [];
  }

  async load() {
    try {
      const rows = await getJSON("tools");
      this.list = Array.isArray(rows) ? rows.filter((t) => t && t.tool && t.definition) : [];
    } catch {
      this.list = [];  // 403: no tools on this server (or a router: tools live on no model)
    }
    return this.list;
  }

  find(name) {
    return this.list.find((t) => t.tool === name) || null;
  }

  writes(name) {
    const t = this.find(name);
    return !!(t && t.permissions && t.permissions.write);
  }

  // Whether `name` was offered to the model: listed, and not switched off.
  offered(name, disabled) {
    return !!this.find(name) && !(disabled || []).includes(name);
  }

  // The definitions for a chat request: the listed tools the user did not switch off.
  definitions(disabled) {
    return this.list.filter((t) => this.offered(t.tool, disabled)).map((t) => t.definition);
  }
}

// A call's arguments as an object, or the error result that goes back instead of running it.
export function parseArguments(call) {
  try {
    const params = call.arguments.trim() ? JSON.parse(call.arguments) : {};
    if (!params || typeof params !== "object" || Array.isArray(params)) throw new Error("not an object");
    return { params };
  } catch (e) {
    return { error: errorResult(`the arguments are not a JSON object: ${e.message}`) };
  }
}

// Run tool `name` with `params`; `onChunk(text)` sees streamed output. Returns the result text
// for the model and whether it is an error.
export async function runTool(name, params, signal, onChunk) {
  try {
    if (STREAMED.has(name)) return await streamed(name, params, signal, onChunk);
    const resp = await request("tools", { method: "POST", body: { tool: name, params }, signal });
    const result = await resp.json();
    if (typeof result.plain_text_response === "string") return { text: result.plain_text_response, error: false };
    return { text: JSON.stringify(result), error: "error" in result };
  } catch (e) {
    if (e.name === "AbortError") throw e;
    return errorResult(e.message || String(e));  // 400 bad params, 404 unknown tool: the model reads why
  }
}

async function streamed(tool, params, signal, onChunk) {
  const resp = await request("tools", { method: "POST", body: { tool, params, stream: true }, signal });
  let text = "";
  for await (const ev of sseEvents(resp)) {
    if (typeof ev.chunk === "string") {
      text += ev.chunk;
      onChunk(text);
    }
    if (ev.done) {
      if (ev.error) text += (text && !text.endsWith("\n") ? "\n" : "") + `[error: ${ev.error}]`;
      return { text, error: !!ev.error };
    }
  }
  return { text, error: false };
}

export function errorResult(message) {
  return { text: JSON.stringify({ error: message }), error: true };
}

// The request messages of an assistant message: itself (with the tool calls that have a
// result) and one `tool` message per result, as the chat API wants them.
export function assistantMessages(m) {
  const calls = (m.toolCalls || []).filter((tc) => tc.result !== undefined);
  if (m.error || (!m.content && !calls.length)) return [];
  const out = { role: "assistant", content: m.content || "" };
  if (!calls.length) return [out];
  out.tool_calls = calls.map((tc) => ({ id: tc.id, type: "function", function: { name: tc.name, arguments: tc.arguments || "{}" } }));
  return [out, ...calls.map((tc) => ({ role: "tool", tool_call_id: tc.id, content: tc.result }))];
}
