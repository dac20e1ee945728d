// Attachments: text files and long pasted text, sent as context ahead of the user's message.

export const PASTE_LIMIT = 2000;  // characters: a longer paste becomes an attachment
const MAX_BYTES = 1 << 20;

export async function readAttachment(file) {
  if (file.size > MAX_BYTES) throw new Error(`${file.name}: larger than 1 MiB; attach text files only`);
  const buf = new Uint8Array(await file.arrayBuffer());
  if (buf.includes(0)) throw new Error(`${file.name}: not a text file`);
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(buf);
  } catch {
    throw new Error(`${file.name}: not UTF-8 text`);
  }
  return { name: file.name, text };
}

export function pastedAttachment(text) {
  return { name: `pasted text (${text.length} chars)`, text };
}

// The content sent for a user message: each attachment in a fenced block, then the message.
export function formatUserContent(msg) {
  const parts = [];
  for (const a of msg.attachments || []) {
    const fence = a.text.includes("```") ? "````" : "```";
    parts.push(`${a.name}:\n${fence}\n${a.text}\n${fence}`);
  }
  if (msg.content) parts.push(msg.content);
  return parts.join("\n\n");
}
