// The chat page: conversations (sidebar), the message view, the composer and settings.
import { renderMarkdown } from "./markdown.js";
import { Store } from "./store.js";
import { loadSettings, saveSettings, samplerParams, buildSamplerFields, setPlaceholders } from "./settings.js";
import { streamChat, applyDelta, ApiError } from "./stream.js";
import { readAttachment, pastedAttachment, PASTE_LIMIT, formatUserContent } from "./attachments.js";

const $ = (id) => document.getElementById(id);
const store = new Store();
const settings = loadSettings();
const state = { convId: null, controller: null, streamingId: null, pending: [], defaults: null, modelName: "" };

// ---- server facts ----------------------------------------------------------------------------

function authHeaders() {
  return settings.api_key ? { Authorization: "Bearer " + settings.api_key } : {};
}

function baseName(p) {
  const s = String(p || "");
  return s.split(/[\\/]/).pop().replace(/\.gguf$/i, "") || s;
}

async function loadServerInfo() {
  try {
    const r = await fetch("v1/models", { headers: authHeaders() });
    const j = await r.json();
    const m = j.data && j.data[0];
    if (m) setModelName(m.id);
  } catch {
    $("model-meta").textContent = "server unreachable";
    return;
  }
  try {
    const r = await fetch("props", { headers: authHeaders() });
    if (r.status === 401) { $("model-meta").textContent = "this server needs an API key: set it in Settings"; return; }
    if (r.status === 503) { $("model-meta").textContent = "loading the model…"; setTimeout(loadServerInfo, 1000); return; }
    const p = await r.json();
    if (p.model_alias) setModelName(p.model_alias);
    const dgs = p.default_generation_settings || {};
    state.defaults = dgs.params || null;
    setPlaceholders($("sampler-fields"), state.defaults);
    const facts = [];
    if (dgs.n_ctx) facts.push(`context ${dgs.n_ctx}`);
    if (p.total_slots) facts.push(`${p.total_slots} slot${p.total_slots === 1 ? "" : "s"}`);
    if (p.chat_template_caps && p.chat_template_caps.supports_tools) facts.push("tools");
    if (p.build_info) facts.push(p.build_info);
    $("model-meta").textContent = facts.join(" · ");
    $("model-meta").title = p.model_path || "";
  } catch {
    $("model-meta").textContent = "";
  }
}

function setModelName(id) {
  state.modelName = baseName(id);
  $("model-name").textContent = state.modelName;
  $("model-name").title = id;
  document.title = state.modelName + " · llama";
}

// ---- sidebar ---------------------------------------------------------------------------------

function renderSidebar() {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const conv of store.list()) {
    const li = document.createElement("li");
    li.dataset.id = conv.id;
    if (conv.id === state.convId) li.classList.add("active");
    const name = document.createElement("button");
    name.type = "button";
    name.className = "conv-name";
    name.textContent = conv.name;
    name.title = conv.name;
    name.addEventListener("click", () => openConversation(conv.id));
    const rename = smallButton("✎", "Rename", () => startRename(li, conv));
    rename.classList.add("rename");
    const del = smallButton("×", "Delete", () => {
      if (!confirm(`Delete "${conv.name}"?`)) return;
      if (state.convId === conv.id) stop();
      store.remove(conv.id);
      if (state.convId === conv.id) state.convId = null;
      renderAll();
    });
    del.classList.add("delete");
    li.append(name, rename, del);
    ul.appendChild(li);
  }
}

function smallButton(text, title, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "small";
  b.textContent = text;
  b.title = title;
  b.setAttribute("aria-label", title);
  b.addEventListener("click", onClick);
  return b;
}

function startRename(li, conv) {
  const input = document.createElement("input");
  input.value = conv.name;
  input.className = "rename-input";
  li.replaceChildren(input);
  input.focus();
  input.select();
  let done = false;
  const finish = (ok) => {
    if (done) return;
    done = true;
    if (ok) store.rename(conv.id, input.value);
    renderSidebar();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") finish(true);
    if (e.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
}

function openConversation(id) {
  if (state.controller) stop();
  state.convId = id;
  renderAll();
}

// ---- messages --------------------------------------------------------------------------------

function currentConv() {
  return state.convId ? store.get(state.convId) : null;
}

function renderAll() {
  renderSidebar();
  renderLog();
}

function renderLog() {
  const log = $("log");
  log.replaceChildren();
  const conv = currentConv();
  if (!conv || !conv.leaf) {
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = "Send a message to start a conversation.";
    log.appendChild(p);
    return;
  }
  for (const msg of store.path(conv)) log.appendChild(messageElement(conv, msg));
  log.scrollTop = log.scrollHeight;
}

function messageElement(conv, msg) {
  const div = document.createElement("div");
  div.className = `msg ${msg.role}` + (msg.error ? " error" : "");
  div.dataset.id = msg.id;
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = msg.role === "user" ? "You" : state.modelName || "assistant";
  div.appendChild(who);
  if (msg.attachments && msg.attachments.length) {
    const list = document.createElement("div");
    list.className = "attachment-list";
    for (const a of msg.attachments) list.appendChild(chip(a.name));
    div.appendChild(list);
  }
  const reasoning = document.createElement("details");
  reasoning.className = "reasoning";
  reasoning.innerHTML = "<summary>Reasoning</summary><div class=\"reasoning-text\"></div>";
  div.appendChild(reasoning);
  const tools = document.createElement("div");
  tools.className = "tool-calls";
  div.appendChild(tools);
  const content = document.createElement("div");
  content.className = "content";
  div.appendChild(content);
  const stats = document.createElement("div");
  stats.className = "stats";
  div.appendChild(stats);
  div.appendChild(messageTools(conv, msg));
  fillMessage(div, msg);
  return div;
}

// (Re)fill the parts of a message element that change while streaming.
function fillMessage(div, msg) {
  const content = div.querySelector(".content");
  if (msg.role === "user") content.textContent = msg.content;
  else content.innerHTML = renderMarkdown(msg.content);
  if (msg.error) {
    const e = document.createElement("p");
    e.className = "error-text";
    e.textContent = msg.error;
    content.appendChild(e);
  }
  const reasoning = div.querySelector(".reasoning");
  reasoning.hidden = !msg.reasoning;
  reasoning.querySelector(".reasoning-text").textContent = msg.reasoning || "";
  reasoning.querySelector("summary").textContent =
    state.streamingId === msg.id && !msg.content ? "Reasoning…" : "Reasoning";
  const tools = div.querySelector(".tool-calls");
  tools.replaceChildren();
  for (const tc of msg.toolCalls || []) {
    const box = document.createElement("div");
    box.className = "tool-call";
    const title = document.createElement("div");
    title.textContent = `Tool call: ${tc.name || "(unnamed)"}`;
    const args = document.createElement("code");
    args.textContent = tc.arguments;
    box.append(title, args);
    tools.appendChild(box);
  }
  div.querySelector(".stats").textContent = statsLine(msg);
}

function statsLine(msg) {
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

function messageTools(conv, msg) {
  const bar = document.createElement("div");
  bar.className = "tools";
  const sibs = store.siblings(conv, msg);
  if (sibs.length > 1) {
    const i = sibs.indexOf(msg.id);
    const nav = document.createElement("span");
    nav.className = "branch";
    const prev = smallButton("‹", "Previous version", () => { store.switchBranch(conv, msg, -1); renderLog(); });
    prev.classList.add("prev-branch");
    prev.disabled = i === 0 || !!state.controller;
    const label = document.createElement("span");
    label.className = "branch-label";
    label.textContent = `${i + 1}/${sibs.length}`;
    const next = smallButton("›", "Next version", () => { store.switchBranch(conv, msg, +1); renderLog(); });
    next.classList.add("next-branch");
    next.disabled = i === sibs.length - 1 || !!state.controller;
    nav.append(prev, label, next);
    bar.appendChild(nav);
  }
  const copy = button("Copy", "copy-message", () => copyText(msg.content, copy));
  bar.appendChild(copy);
  if (msg.role === "user") {
    bar.appendChild(button("Edit", "edit", () => startEdit(conv, msg)));
  } else {
    bar.appendChild(button("Regenerate", "regenerate", () => regenerate(conv, msg)));
  }
  return bar;
}

function button(text, cls, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = cls;
  b.textContent = text;
  b.addEventListener("click", onClick);
  return b;
}

async function copyText(text, btn) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const ta = document.createElement("textarea");
    ta.value = text;
    document.body.appendChild(ta);
    ta.select();
    document.execCommand("copy");
    ta.remove();
  }
  if (btn) {
    const old = btn.textContent;
    btn.textContent = "Copied";
    setTimeout(() => { btn.textContent = old; }, 1200);
  }
}

function startEdit(conv, msg) {
  if (state.controller) return;
  const div = $("log").querySelector(`.msg[data-id="${msg.id}"]`);
  const content = div.querySelector(".content");
  const ta = document.createElement("textarea");
  ta.className = "edit";
  ta.value = msg.content;
  const save = button("Save & send", "save-edit", () => {
    const text = ta.value.trim();
    if (!text) return;
    const user = store.add(conv, msg.parent, { role: "user", content: text, attachments: msg.attachments || [] });
    const reply = store.add(conv, user.id, { role: "assistant" });
    store.save();
    renderLog();
    generate(conv, reply);
  });
  const cancel = button("Cancel", "cancel-edit", () => renderLog());
  content.replaceChildren(ta, save, cancel);
  ta.focus();
}

function regenerate(conv, msg) {
  if (state.controller) return;
  const reply = store.add(conv, msg.parent, { role: "assistant" });
  store.save();
  renderLog();
  generate(conv, reply);
}

// ---- generation ------------------------------------------------------------------------------

function requestMessages(conv, upTo) {
  const out = [];
  if (settings.system && settings.system.trim()) out.push({ role: "system", content: settings.system });
  for (const m of store.path(conv)) {
    if (m.id === upTo.id) break;
    if (m.role === "assistant" && (m.error || !m.content) && !(m.toolCalls && m.toolCalls.length)) continue;
    out.push({ role: m.role, content: m.role === "user" ? formatUserContent(m) : m.content });
  }
  return out;
}

async function generate(conv, msg) {
  const body = { messages: requestMessages(conv, msg), ...samplerParams(settings) };
  if (state.modelName) body.model = state.modelName;
  state.controller = new AbortController();
  state.streamingId = msg.id;
  setBusy(true);
  const t0 = performance.now();
  let tFirst = null;
  let pieces = 0;
  let scheduled = false;
  const el = () => $("log").querySelector(`.msg[data-id="${msg.id}"]`);
  const paint = () => {
    scheduled = false;
    const div = el();
    if (div) fillMessage(div, msg);
    const log = $("log");
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
  };
  msg.stats = {};
  try {
    await streamChat(body, authHeaders(), state.controller.signal, (chunk) => {
      const n = applyDelta(msg, chunk);
      const now = performance.now();
      if (n && tFirst === null) { tFirst = now; msg.stats.ttftMs = now - t0; }
      pieces += n;
      if (tFirst !== null) {
        msg.stats.n = pieces;
        const secs = (now - tFirst) / 1000;
        if (pieces > 1 && secs > 0) msg.stats.tps = (pieces - 1) / secs;
      }
      if (chunk.timings) {
        const t = chunk.timings;
        if (t.predicted_n !== undefined) msg.stats.n = t.predicted_n;
        if (t.predicted_per_second) msg.stats.tps = t.predicted_per_second;
        if (t.prompt_n !== undefined) msg.stats.promptN = t.prompt_n;
        if (t.prompt_per_second) msg.stats.promptTps = t.prompt_per_second;
      }
      if (!scheduled) { scheduled = true; requestAnimationFrame(paint); }
    });
  } catch (e) {
    if (e.name === "AbortError") {
      msg.stopped = true;
    } else {
      msg.error = e instanceof ApiError && e.status === 401
        ? "Invalid or missing API key: set it in Settings."
        : `Error: ${e.message || e}`;
    }
  } finally {
    state.controller = null;
    state.streamingId = null;
    conv.updated = Date.now();
    store.save();
    setBusy(false);
    if (state.convId === conv.id) renderLog();
    renderSidebar();
  }
}

function stop() {
  if (state.controller) state.controller.abort();
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  document.body.classList.toggle("busy", busy);
}

function send(text) {
  let conv = currentConv();
  if (!conv) {
    conv = store.create();
    state.convId = conv.id;
  }
  if (!conv.leaf || conv.name === "New chat") conv.name = text.replace(/\s+/g, " ").slice(0, 50) || "New chat";
  const user = store.add(conv, conv.leaf, { role: "user", content: text, attachments: state.pending });
  state.pending = [];
  renderAttachments();
  const reply = store.add(conv, user.id, { role: "assistant" });
  store.save();
  renderAll();
  generate(conv, reply);
}

// ---- attachments -----------------------------------------------------------------------------

function chip(name, onRemove) {
  const c = document.createElement("span");
  c.className = "chip";
  c.textContent = name;
  if (onRemove) {
    const x = smallButton("×", "Remove " + name, onRemove);
    c.appendChild(x);
  }
  return c;
}

function renderAttachments() {
  const box = $("attachments");
  box.replaceChildren();
  state.pending.forEach((a, i) => box.appendChild(chip(a.name, () => { state.pending.splice(i, 1); renderAttachments(); })));
}

async function addFiles(files) {
  for (const f of files) {
    try {
      state.pending.push(await readAttachment(f));
    } catch (e) {
      alert(e.message);
    }
  }
  renderAttachments();
}

// ---- settings dialog -------------------------------------------------------------------------

function initSettings() {
  $("set-system").value = settings.system || "";
  $("set-api_key").value = settings.api_key || "";
  $("set-system").addEventListener("input", () => { settings.system = $("set-system").value; saveSettings(settings); });
  $("set-api_key").addEventListener("input", () => { settings.api_key = $("set-api_key").value; saveSettings(settings); });
  buildSamplerFields($("sampler-fields"), settings, state.defaults, (name, value) => {
    if (value === "") delete settings[name];
    else settings[name] = value;
    saveSettings(settings);
  });
  $("open-settings").addEventListener("click", () => $("settings").showModal());
  $("close-settings").addEventListener("click", () => { $("settings").close(); loadServerInfo(); });
  $("settings-form").addEventListener("submit", (e) => e.preventDefault());
  $("reset-settings").addEventListener("click", () => {
    for (const k of Object.keys(settings)) if (k !== "api_key") delete settings[k];
    saveSettings(settings);
    $("set-system").value = "";
    for (const input of $("sampler-fields").querySelectorAll("input")) input.value = "";
  });
}

// ---- wiring ----------------------------------------------------------------------------------

function init() {
  initSettings();
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    if (state.controller) return;
    const text = $("input").value.trim();
    if (!text && !state.pending.length) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  $("input").addEventListener("paste", (e) => {
    const text = e.clipboardData && e.clipboardData.getData("text/plain");
    if (text && text.length > PASTE_LIMIT) {
      e.preventDefault();
      state.pending.push(pastedAttachment(text));
      renderAttachments();
    }
  });
  $("stop").addEventListener("click", stop);
  $("attach").addEventListener("change", (e) => { addFiles([...e.target.files]); e.target.value = ""; });
  $("new-chat").addEventListener("click", () => { stop(); state.convId = null; renderAll(); $("input").focus(); });
  $("toggle-sidebar").addEventListener("click", () => {
    document.body.classList.toggle(window.innerWidth > 700 ? "no-sidebar" : "show-sidebar");
  });
  $("export").addEventListener("click", () => {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([store.exportJSON()], { type: "application/json" }));
    a.download = `llama-conversations-${new Date().toISOString().slice(0, 10)}.json`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  });
  $("import").addEventListener("change", async (e) => {
    const f = e.target.files[0];
    e.target.value = "";
    if (!f) return;
    try {
      store.importJSON(await f.text());
      renderAll();
    } catch (err) {
      alert(`Import failed: ${err.message}`);
    }
  });
  // code-block copy buttons live in rendered Markdown: one delegated handler
  $("log").addEventListener("click", (e) => {
    const b = e.target.closest("button.copy-code");
    if (!b) return;
    const code = b.closest(".code-block")?.querySelector("pre code");
    if (code) copyText(code.textContent, b);
  });
  window.addEventListener("storage", () => { store.conversations = new Store().conversations; renderAll(); });
  const latest = store.list()[0];
  state.convId = latest ? latest.id : null;
  renderAll();
  loadServerInfo();
  window.llamaUI = { store, settings, state };  // for tests and the console
}

init();
