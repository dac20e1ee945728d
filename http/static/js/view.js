// Rendering a message: who, attachments, reasoning and tool calls (folded), the content
// (Markdown for the model, plain text for the user), the stats line and the action bar.
// Model output is untrusted: it only reaches the page through renderMarkdown (sanitised) or
// textContent.
import { renderMarkdown } from "./markdown.js";
import { waitingText } from "./progress.js";

export function smallButton(text, title, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "small";
  b.textContent = text;
  b.title = title;
  b.setAttribute("aria-label", title);
  b.addEventListener("click", onClick);
  return b;
}

export function button(text, cls, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = cls;
  b.textContent = text;
  b.addEventListener("click", onClick);
  return b;
}

// An attachment's chip: its name, a thumbnail for an image (its data: URL; nothing else is
// shown, so an imported conversation cannot point the page elsewhere), a note for audio.
export function chip(name, onRemove, attachment) {
  const c = document.createElement("span");
  c.className = "chip";
  const kind = attachment && attachment.kind;
  if (kind === "image" && /^data:image\/[a-z0-9.+-]+;base64,/i.test(attachment.url || "")) {
    const img = el("img", "thumb");
    img.src = attachment.url;
    img.alt = "";
    c.appendChild(img);
  } else if (kind === "audio") {
    c.appendChild(el("span", "thumb audio", "♪"));
  }
  c.appendChild(document.createTextNode(name));
  if (onRemove) c.appendChild(smallButton("×", "Remove " + name, onRemove));
  return c;
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// `ctx`: {modelName, streamingId, siblings: [ids], busy, actions: {...}, models: [ids] | null}.
export function messageElement(msg, ctx) {
  const div = el("div", `msg ${msg.role}` + (msg.error ? " error" : ""));
  div.dataset.id = msg.id;
  if (ctx.continuation) div.classList.add("continuation");
  div.appendChild(el("div", "who", msg.role === "user" ? "You" : msg.model || ctx.modelName || "assistant"));
  if (msg.attachments && msg.attachments.length) {
    const list = el("div", "attachment-list");
    for (const a of msg.attachments) list.appendChild(chip(a.name, null, a));
    div.appendChild(list);
  }
  const reasoning = el("details", "reasoning");
  reasoning.append(el("summary", "", "Reasoning"), el("div", "reasoning-text"));
  div.append(reasoning, el("div", "content"), el("div", "tool-calls"), el("div", "stats"), messageTools(msg, ctx));
  fillMessage(div, msg, ctx.streamingId === msg.id);
  return div;
}

// (Re)fill the parts of a message element that change while streaming or running tools.
export function fillMessage(div, msg, streaming) {
  const content = div.querySelector(".content");
  if (msg.role === "user") content.textContent = msg.content;
  else content.innerHTML = renderMarkdown(msg.content);
  if (msg.error) content.appendChild(el("p", "error-text", msg.error));
  const reasoning = div.querySelector(".reasoning");
  reasoning.hidden = !msg.reasoning;
  reasoning.querySelector(".reasoning-text").textContent = msg.reasoning || "";
  reasoning.querySelector("summary").textContent = streaming && !msg.content ? "Reasoning…" : "Reasoning";
  fillToolCalls(div.querySelector(".tool-calls"), msg.toolCalls || []);
  const waiting = streaming && !msg.content && !msg.reasoning && !(msg.toolCalls || []).length ? waitingText(msg) : "";
  div.querySelector(".stats").textContent = waiting || statsLine(msg);
  div.querySelector(".stats").classList.toggle("waiting", !!waiting);
}

const STATE_TEXT = { running: "running…", asking: "waiting for your answer…", done: "", error: "error", declined: "declined", stopped: "stopped" };

// Each call folded (as reasoning is): its name and state in the summary, then the arguments
// and the result. A <details> is kept across repaints so that an opened one stays open.
function fillToolCalls(box, calls) {
  while (box.children.length > calls.length) box.lastChild.remove();
  calls.forEach((tc, i) => {
    let d = box.children[i];
    if (!d) {
      d = el("details", "tool-call");
      d.append(el("summary"), el("div", "tool-label", "Arguments"), el("pre", "tool-args"), el("div", "tool-label", "Result"),
        el("pre", "tool-result"));
      box.appendChild(d);
    }
    d.dataset.state = tc.state || "";
    const state = STATE_TEXT[tc.state] || "";
    d.querySelector("summary").textContent = `Tool call: ${tc.name || "(unnamed)"}` + (state ? ` · ${state}` : "");
    d.querySelector(".tool-args").textContent = prettyArgs(tc.arguments);
    const result = tc.result !== undefined ? tc.result : tc.output || "";
    d.querySelector(".tool-result").textContent = result;
    d.querySelector(".tool-result").hidden = d.querySelectorAll(".tool-label")[1].hidden = !result;
  });
}

function prettyArgs(args) {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return String(args || "");
  }
}

export function statsLine(msg) {
  const s = msg.stats;
  if (!s) return "";
  const parts = [];
  if (s.ttftMs !== undefined) parts.push(`TTFT ${Math.round(s.ttftMs)} ms`);
  if (s.promptN !== undefined) parts.push(`prompt ${s.promptN} tok` + (s.promptTps ? ` (${s.promptTps.toFixed(1)} tok/s)` : ""));
  if (s.n !== undefined) parts.push(`${s.n} tokens`);
  if (s.tps !== undefined && Number.isFinite(s.tps)) parts.push(`${s.tps.toFixed(1)} tok/s`);
  if (msg.stopped) parts.push("stopped");
  else if (msg.finishReason && msg.finishReason !== "stop") parts.push(msg.finishReason);
  return parts.join(" · ");
}

function messageTools(msg, ctx) {
  const a = ctx.actions;
  const bar = el("div", "tools");
  const sibs = ctx.siblings;
  if (sibs.length > 1) {
    const i = sibs.indexOf(msg.id);
    const nav = el("span", "branch");
    const prev = smallButton("‹", "Previous version", () => a.switchBranch(msg, -1));
    prev.classList.add("prev-branch");
    prev.disabled = i === 0 || ctx.busy;
    const next = smallButton("›", "Next version", () => a.switchBranch(msg, +1));
    next.classList.add("next-branch");
    next.disabled = i === sibs.length - 1 || ctx.busy;
    nav.append(prev, el("span", "branch-label", `${i + 1}/${sibs.length}`), next);
    bar.appendChild(nav);
  }
  const copy = button("Copy", "copy-message", () => a.copy(msg.content, copy));
  bar.appendChild(copy);
  if (msg.role === "user") {
    bar.appendChild(button("Edit", "edit", () => a.edit(msg)));
    return bar;
  }
  bar.appendChild(button("Regenerate", "regenerate", () => a.regenerate(msg)));
  if (ctx.models && ctx.models.length > 1) {
    // router mode: the same answer again from another model (loaded first when it is not)
    const pick = document.createElement("select");
    pick.className = "regen-model";
    pick.title = "Regenerate with another model";
    pick.appendChild(new Option("with…", ""));
    for (const id of ctx.models) pick.appendChild(new Option(id, id));
    pick.addEventListener("change", () => { if (pick.value) a.regenerate(msg, pick.value); });
    bar.appendChild(pick);
  }
  return bar;
}
