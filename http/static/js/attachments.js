// Attachments: text files, PDF (its text, extracted in the browser by PDF.js), long pasted
// text, and images and audio for a model that takes them. Text goes ahead of the user's
// message in fenced blocks; images and audio become content parts (image_url, input_audio),
// which only a model whose /props lists that modality may receive (the modality check).
//
// Stored with the message: {name, kind: "text" | "pdf", text} or {name, kind: "image", url}
// (a data: URL) or {name, kind: "audio", data (base64), format}.
import { pdfText } from "./pdf.js";

export const PASTE_LIMIT = 2000;  // characters: a longer paste becomes an attachment
const MAX_TEXT = 1 << 20;  // bytes of text (a text file, or what a PDF holds)
const MAX_PDF = 32 << 20;  // bytes of PDF file
const MAX_MEDIA = 2 << 20;  // bytes of image or audio (kept in the browser's storage)
const AUDIO = { "audio/mpeg": "mp3", "audio/mp3": "mp3", "audio/wav": "wav", "audio/x-wav": "wav", "audio/wave": "wav" };

function mib(n) {
  return `${n / (1 << 20)} MiB`;
}

function isPdf(file, head) {
  return file.type === "application/pdf" || /\.pdf$/i.test(file.name) || String.fromCharCode(...head.slice(0, 5)) === "%PDF-";
}

function audioFormat(file) {
  return AUDIO[file.type] || (/\.mp3$/i.test(file.name) ? "mp3" : /\.wav$/i.test(file.name) ? "wav" : "");
}

// Read a File into an attachment; `modalities` ({vision, audio}) and `modelName` are the
// selected model's, for the message that refuses media it cannot take.
export async function readAttachment(file, modalities, modelName) {
  const model = modelName || "this model";
  if (file.type.startsWith("image/")) {
    if (!modalities.vision) throw new Error(`${file.name}: ${model} does not take images`);
    if (file.size > MAX_MEDIA) throw new Error(`${file.name}: larger than ${mib(MAX_MEDIA)}`);
    return { name: file.name, kind: "image", url: await dataUrl(file) };
  }
  const format = audioFormat(file);
  if (format) {
    if (!modalities.audio) throw new Error(`${file.name}: ${model} does not take audio`);
    if (file.size > MAX_MEDIA) throw new Error(`${file.name}: larger than ${mib(MAX_MEDIA)}`);
    return { name: file.name, kind: "audio", data: (await dataUrl(file)).split(",", 2)[1], format };
  }
  const buf = new Uint8Array(await file.arrayBuffer());
  if (isPdf(file, buf)) {
    if (buf.length > MAX_PDF) throw new Error(`${file.name}: larger than ${mib(MAX_PDF)}`);
    const text = await pdfText(buf, file.name);
    if (text.length > MAX_TEXT) throw new Error(`${file.name}: its text is larger than ${mib(MAX_TEXT)}`);
    return { name: file.name, kind: "pdf", text };
  }
  if (buf.length > MAX_TEXT) throw new Error(`${file.name}: larger than ${mib(MAX_TEXT)}; attach text files only`);
  if (buf.includes(0)) throw new Error(`${file.name}: not a text file`);
  try {
    return { name: file.name, kind: "text", text: new TextDecoder("utf-8", { fatal: true }).decode(buf) };
  } catch {
    throw new Error(`${file.name}: not UTF-8 text`);
  }
}

function dataUrl(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(new Error(`${file.name}: cannot be read`));
    r.readAsDataURL(file);
  });
}

export function pastedAttachment(text) {
  return { name: `pasted text (${text.length} chars)`, kind: "text", text };
}

// The modality the attachments need and `modalities` lacks: "images", "audio" or "".
export function missingModality(attachments, modalities) {
  const kinds = new Set((attachments || []).map((a) => a.kind));
  if (kinds.has("image") && !modalities.vision) return "images";
  if (kinds.has("audio") && !modalities.audio) return "audio";
  return "";
}

// The content sent for a user message: each text attachment in a fenced block, then the
// message; with images or audio, an array of content parts (the text first).
export function formatUserContent(msg) {
  const parts = [];
  const media = [];
  for (const a of msg.attachments || []) {
    if (a.kind === "image") media.push({ type: "image_url", image_url: { url: a.url } });
    else if (a.kind === "audio") media.push({ type: "input_audio", input_audio: { data: a.data, format: a.format } });
    else {
      const fence = a.text.includes("```") ? "````" : "```";
      parts.push(`${a.name}:\n${fence}\n${a.text}\n${fence}`);
    }
  }
  if (msg.content) parts.push(msg.content);
  const text = parts.join("\n\n");
  return media.length ? [...(text ? [{ type: "text", text }] : []), ...media] : text;
}
