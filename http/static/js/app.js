// The chat page: conversations (sidebar, search), the message view, the composer, the model
// (router mode: the selector), the tool-call loop, settings and keyboard shortcuts.
import { ApiError, setApiKey } from "./api.js";
import { Store, newId } from "./store.js";
import { loadSettings, saveSettings, samplerParams, buildSamplerFields, setPlaceholders } from "./settings.js";
import { streamChat, applyDelta } from "./stream.js";
import { readAttachment, pastedAttachment, PASTE_LIMIT, formatUserContent, missingModality } from "./attachments.js";
import { Server, baseName } from "./server.js";
import { watchSlots } from "./progress.js";
import { Tools, runTool, parseArguments, assistantMessages, errorResult, DECLINED, STOPPED } from "./tools.js";
import { renderToolList, confirmTool, allowed, maxTurns } from "./toolui.js";
import { searchConversations } from "./search.js";
import { installShortcuts, SHORTCUTS } from "./shortcuts.js";
import { messageElement, fillMessage, smallButton, button, chip } from "./view.js";

const $ = (id) => document.getElementById(id);
const store = new Store();
const settings = loadSettings();
const server = new Server();
const tools = new Tools();
const state = { convId: null, controller: null, streamingId: null, pending: [], defaults: null, modelName: "", model: "", query: "" };
const narrow = window.matchMedia("(max-width: 700px)");
setApiKey(settings.api_key);

// ---- server facts and the model --------------------------------------------------------------

async function loadServerInfo() {
  try {
    await server.refresh();
  } catch (e) {
    const status = e instanceof ApiError ? e.status : 0;
    if (status === 503) { setMeta("loading the model…"); setTimeout(loadServerInfo, 1000); return; }
    setMeta(status === 401 ? "this server needs an API key: set it in Settings" : "server unreachable");
    return;
  }
  $("model-select").hidden = !server.router;
  $("model-name").hidden = server.router;
  if (server.router) {
    const ids = server.models.map((m) => m.id);
    const loaded = ids.find((id) => server.isLoaded(id));
    state.model = ids.includes(settings.model) ? settings.model : loaded || "";
    renderModelSelect();
    if (state.model && server.isLoaded(state.model)) await showModel(state.model);
    else setMeta(state.model ? `${state.model}: loads when you send` : `${ids.length} models: pick one`);
  } else {
    setModelName(baseName(server.props.model_alias || server.props.model_path));
    showFacts(server.props);
  }
  if (!server.router) await tools.load();  // a router serves no tools (its models do not either)
  $("open-tools").hidden = !tools.list.length;
  renderLog();
}

function setMeta(text, title = "") {
  $("model-meta").textContent = text;
  $("model-meta").title = title;
}

function setModelName(name) {
  state.modelName = name;
  $("model-name").textContent = name;
  $("model-name").title = name;
  document.title = name + " · llama";
}

function showFacts(p) {
  const dgs = p.default_generation_settings || {};
  state.defaults = dgs.params || null;
  setPlaceholders($("sampler-fields"), state.defaults);
  const facts = [];
  if (dgs.n_ctx) facts.push(`context ${dgs.n_ctx}`);
  if (p.total_slots) facts.push(`${p.total_slots} slot${p.total_slots === 1 ? "" : "s"}`);
  const m = p.modalities || {};
  if (m.vision) facts.push("vision");
  if (m.audio) facts.push("audio");
  showMediaNote(m);
  if (p.chat_template_caps && p.chat_template_caps.supports_tools) facts.push("tools");
  if (p.build_info) facts.push(p.build_info);
  setMeta(facts.join(" · "), p.model_path || "");
}

// Images and audio per the model's /props modalities: with no vision (a server without a
// projector, -mm) a note beside the composer says so; such attachments are refused and never
// sent. The Attach button's tooltip names what the model takes.
function showMediaNote(m) {
  const takes = [m.vision ? "images" : "", m.audio ? "audio" : ""].filter(Boolean);
  const note = $("media-note");
  note.hidden = !!m.vision;
  note.textContent = m.vision ? "" : `This model takes no images${m.audio ? "" : " or audio"} (its server has no projector).`;
  document.querySelector("label.attach").title = "Attach text files, PDF (its text)" +
    (takes.length ? `, ${takes.join(" and ")}` : "; this model takes no images or audio");
}

// Router mode: the selector, models grouped as llama-server's (Loaded / Available).
function renderModelSelect() {
  const sel = $("model-select");
  sel.replaceChildren();
  if (!state.model) sel.appendChild(new Option("Select a model", ""));
  const groups = { Loaded: [], Available: [] };
  for (const m of server.models) {
    const s = (m.status && m.status.value) || "unloaded";
    const note = { loading: " (loading…)", sleeping: " (sleeping)", unloading: " (unloading…)" }[s] || (m.status && m.status.failed ? " (failed)" : "");
    groups[server.isLoaded(m.id) ? "Loaded" : "Available"].push(new Option(m.id + note, m.id));
  }
  for (const [label, opts] of Object.entries(groups)) {
    if (!opts.length) continue;
    const g = document.createElement("optgroup");
    g.label = label;
    g.append(...opts);
    sel.appendChild(g);
  }
  sel.value = state.model;
  if (state.model) document.title = state.model + " · llama";
}

async function showModel(id, signal) {
  try {
    const props = await server.ensureLoaded(id, (s) => { setMeta(`${id}: ${s}…`); renderModelSelect(); }, signal);
    if (state.model === id) showFacts(props);
    return true;
  } catch (e) {
    if (state.model === id) setMeta(e.message || String(e));
    return false;
  } finally {
    renderModelSelect();
  }
}

function selectModel(id) {
  state.model = id;
  settings.model = id;
  saveSettings(settings);
  renderModelSelect();
  if (!id) return;
  setMeta(`${id}: loading…`);
  showModel(id);  // load on select, as llama-server's selector does
}

// ---- sidebar ---------------------------------------------------------------------------------

function visibleConversations() {
  return searchConversations(store.list(), state.query);
}

function renderSidebar() {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const { conv, snippet } of visibleConversations()) {
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
    const del = smallButton("×", "Delete", () => deleteConversation(conv));
    del.classList.add("delete");
    li.append(name, rename, del);
    if (snippet) {
      const s = document.createElement("div");
      s.className = "snippet";
      const mark = document.createElement("mark");
      mark.textContent = snippet.match;
      s.append(snippet.before, mark, snippet.after);
      li.appendChild(s);
    }
    ul.appendChild(li);
  }
  if (state.query && !ul.children.length) {
    const li = document.createElement("li");
    li.className = "no-match";
    li.textContent = "No conversation matches.";
    ul.appendChild(li);
  }
}

function deleteConversation(conv) {
  if (!conv || !confirm(`Delete "${conv.name}"?`)) return;
  if (state.convId === conv.id) stop();
  store.remove(conv.id);
  if (state.convId === conv.id) state.convId = null;
  renderAll();
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
  if (narrow.matches) showSidebar(false);
  renderAll();
}

// Wide screens hide the sidebar on demand; narrow ones show it over the chat (with a scrim).
function showSidebar(show) {
  if (narrow.matches) {
    document.body.classList.toggle("show-sidebar", show);
    $("scrim").hidden = !show;
  } else {
    document.body.classList.toggle("no-sidebar", !show);
  }
}

function sidebarShown() {
  return narrow.matches ? document.body.classList.contains("show-sidebar") : !document.body.classList.contains("no-sidebar");
}

function focusSearch() {
  showSidebar(true);
  $("search").focus();
  $("search").select();
}

function stepConversation(step) {
  const list = visibleConversations().map((r) => r.conv.id);
  if (!list.length) return;
  const i = list.indexOf(state.convId);
  const j = i < 0 ? 0 : Math.min(list.length - 1, Math.max(0, i + step));
  openConversation(list[j]);
}

// ---- messages --------------------------------------------------------------------------------

function currentConv() {
  return state.convId ? store.get(state.convId) : null;
}

function renderAll() {
  renderSidebar();
  renderLog();
}

const actions = {
  switchBranch(msg, step) { store.switchBranch(currentConv(), msg, step); renderLog(); },
  copy: copyText,
  edit: (msg) => startEdit(currentConv(), msg),
  regenerate: (msg, model) => regenerate(currentConv(), msg, model),
};

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
  const models = server.router ? server.models.map((m) => m.id) : null;
  let prev = null;
  for (const msg of store.path(conv)) {
    log.appendChild(messageElement(msg, {
      modelName: state.modelName, streamingId: state.streamingId, siblings: store.siblings(conv, msg),
      busy: !!state.controller, actions, models, continuation: prev && prev.role === "assistant" && msg.role === "assistant",
    }));
    prev = msg;
  }
  log.scrollTop = log.scrollHeight;
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
    startAnswer(conv, user.id, state.model);
  });
  const cancel = button("Cancel", "cancel-edit", () => renderLog());
  content.replaceChildren(ta, save, cancel);
  ta.focus();
}

function regenerate(conv, msg, model) {
  if (state.controller) return;
  startAnswer(conv, msg.parent, model || msg.model || state.model);
}

// ---- generation: one answer, and the tool-call loop ------------------------------------------

// A new assistant message under `parentId`, answered by `model` (router mode).
function startAnswer(conv, parentId, model) {
  if (server.router && !model) {
    alert("Select a model first.");
    return;
  }
  const reply = store.add(conv, parentId, server.router ? { role: "assistant", model } : { role: "assistant" });
  store.save();
  renderAll();
  respond(conv, reply);
}

function requestMessages(conv, upTo) {
  const out = [];
  if (settings.system && settings.system.trim()) out.push({ role: "system", content: settings.system });
  for (const m of store.path(conv)) {
    if (m.id === upTo.id) break;
    if (m.role === "user") out.push({ role: "user", content: formatUserContent(m) });
    else out.push(...assistantMessages(m));
  }
  return out;
}

// Answer `msg`; while the answer ends in tool calls of the server's tools, run them (asking
// first for write tools), then let the model go on in a new assistant message.
async function respond(conv, msg) {
  state.controller = new AbortController();
  const signal = state.controller.signal;
  setBusy(true);
  try {
    for (let turn = 1; ; turn++) {
      state.streamingId = msg.id;
      await answer(conv, msg, signal);
      if (msg.error || msg.stopped || !(msg.toolCalls || []).length || !tools.list.length) break;
      await runCalls(conv, msg, signal);
      if (signal.aborted) break;
      if (turn % maxTurns(settings) === 0 && !confirm(`The model called tools ${turn} times in a row. Let it go on?`)) break;
      msg = store.add(conv, msg.id, msg.model ? { role: "assistant", model: msg.model } : { role: "assistant" });
      store.save();
      if (state.convId === conv.id) renderLog();
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

function painter(msg) {
  let scheduled = false;
  const paint = () => {
    scheduled = false;
    const div = $("log").querySelector(`.msg[data-id="${msg.id}"]`);
    if (div) fillMessage(div, msg, state.streamingId === msg.id);
    const log = $("log");
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
  };
  return () => { if (!scheduled) { scheduled = true; requestAnimationFrame(paint); } };
}

// Stream one model answer into `msg` (errors and Stop end up in the message itself).
async function answer(conv, msg, signal) {
  const paint = painter(msg);
  const model = msg.model || "";
  msg.stats = {};
  let stopSlots = () => {};
  try {
    if (server.router) {
      msg.loading = model;
      paint();
      await server.ensureLoaded(model, (s) => { msg.loading = `${model} (${s})`; paint(); }, signal);
      delete msg.loading;
    }
    const path = store.path(conv);
    const need = missingModality(path.flatMap((m) => m.attachments || []), server.modalities(model || state.model));
    if (need) throw new Error(`${model || state.modelName || "this model"} does not take ${need}: remove the attachment or pick another model`);
    const body = { messages: requestMessages(conv, msg), ...samplerParams(settings), return_progress: true };
    body.model = model || state.modelName || undefined;
    const defs = tools.definitions(settings.tools_disabled);
    if (defs.length) body.tools = defs;
    stopSlots = watchSlots(server.modelQuery(model), (s) => { msg.slots = s; paint(); });
    await streamInto(msg, body, signal, paint, () => { stopSlots(); delete msg.slots; delete msg.progress; });
  } catch (e) {
    if (e.name === "AbortError") msg.stopped = true;
    else {
      msg.error = e instanceof ApiError && e.status === 401
        ? "Invalid or missing API key: set it in Settings."
        : `Error: ${e.message || e}`;
    }
  } finally {
    stopSlots();
    delete msg.loading;
    delete msg.slots;
    delete msg.progress;
  }
}

// `onFirst` runs at the first generated piece (the wait for a slot and the prompt are over).
async function streamInto(msg, body, signal, paint, onFirst) {
  const t0 = performance.now();
  let tFirst = null;
  let pieces = 0;
  await streamChat(body, signal, (chunk) => {
    const n = applyDelta(msg, chunk);
    const now = performance.now();
    if (n && tFirst === null) { tFirst = now; msg.stats.ttftMs = now - t0; onFirst(); }
    pieces += n;
    if (tFirst !== null) {
      msg.stats.n = pieces;
      const secs = (now - tFirst) / 1000;
      if (pieces > 1 && secs > 0) msg.stats.tps = (pieces - 1) / secs;
    }
    if (chunk.timings) {
      const t = chunk.timings;
      if (t.predicted_n !== undefined && tFirst !== null) msg.stats.n = t.predicted_n;
      if (t.predicted_per_second && tFirst !== null) msg.stats.tps = t.predicted_per_second;
      if (t.prompt_n !== undefined) msg.stats.promptN = t.prompt_n;
      if (t.prompt_per_second) msg.stats.promptTps = t.prompt_per_second;
    }
    paint();
  });
}

// Run the calls of `msg` one after the other; each gets a result (declined and stopped ones
// too), so that the conversation sent next pairs every call with its result.
async function runCalls(conv, msg, signal) {
  const paint = painter(msg);
  for (const tc of msg.toolCalls) {
    if (!tc.id) tc.id = "call_" + newId();
    if (signal.aborted) {
      Object.assign(tc, { state: "stopped", result: JSON.stringify({ error: STOPPED }) });
      continue;
    }
    // a name the model made up (or one switched off), or arguments that are no JSON object:
    // the error goes back, nothing runs and nobody is asked
    const { params, error } = tools.offered(tc.name, settings.tools_disabled)
      ? parseArguments(tc) : { error: errorResult(`unknown tool "${tc.name}"`) };
    if (error) {
      Object.assign(tc, { state: "error", result: error.text });
      continue;
    }
    if (tools.writes(tc.name) && !allowed(settings, tc.name)) {
      tc.state = "asking";
      paint();
      if ((await confirmTool(tc, settings)) === "deny") {
        Object.assign(tc, { state: "declined", result: JSON.stringify({ error: DECLINED }) });
        store.save();
        paint();
        continue;
      }
    }
    tc.state = "running";
    paint();
    try {
      const r = await runTool(tc.name, params, signal, (text) => { tc.output = text; paint(); });
      Object.assign(tc, { state: r.error ? "error" : "done", result: r.text });
    } catch (e) {
      if (e.name !== "AbortError") throw e;
      Object.assign(tc, { state: "stopped", result: JSON.stringify({ error: STOPPED }) });
    }
    delete tc.output;
    store.save();
    paint();
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
  if (server.router && !state.model) {
    alert("Select a model first.");
    return false;
  }
  const need = missingModality(state.pending, server.modalities(state.model));
  if (need) {
    alert(`${state.model || state.modelName || "This model"} does not take ${need}: remove the attachment or pick another model.`);
    return false;
  }
  let conv = currentConv();
  if (!conv) {
    conv = store.create();
    state.convId = conv.id;
  }
  if (!conv.leaf || conv.name === "New chat") conv.name = text.replace(/\s+/g, " ").slice(0, 50) || state.pending[0]?.name || "New chat";
  const user = store.add(conv, conv.leaf, { role: "user", content: text, attachments: state.pending });
  state.pending = [];
  renderAttachments();
  startAnswer(conv, user.id, state.model);
  return true;
}

// ---- attachments -----------------------------------------------------------------------------

function renderAttachments() {
  const box = $("attachments");
  box.replaceChildren();
  state.pending.forEach((a, i) => box.appendChild(chip(a.name, () => { state.pending.splice(i, 1); renderAttachments(); }, a)));
}

async function addFiles(files) {
  const model = server.router ? state.model : state.modelName;
  for (const f of files) {
    try {
      state.pending.push(await readAttachment(f, server.modalities(state.model), model));
    } catch (e) {
      alert(e.message);
    }
    renderAttachments();
  }
}

// ---- settings and tools dialogs --------------------------------------------------------------

function initSettings() {
  $("set-system").value = settings.system || "";
  $("set-api_key").value = settings.api_key || "";
  $("set-system").addEventListener("input", () => { settings.system = $("set-system").value; saveSettings(settings); });
  $("set-api_key").addEventListener("input", () => {
    settings.api_key = $("set-api_key").value;
    setApiKey(settings.api_key);
    saveSettings(settings);
  });
  buildSamplerFields($("sampler-fields"), settings, state.defaults, (name, value) => {
    if (value === "") delete settings[name];
    else settings[name] = value;
    saveSettings(settings);
  });
  for (const [keys, what] of SHORTCUTS) {
    const tr = document.createElement("tr");
    const k = document.createElement("td");
    const kbd = document.createElement("kbd");
    kbd.textContent = keys;
    k.appendChild(kbd);
    const w = document.createElement("td");
    w.textContent = what;
    tr.append(k, w);
    $("shortcut-list").appendChild(tr);
  }
  $("open-settings").addEventListener("click", () => $("settings").showModal());
  $("close-settings").addEventListener("click", () => { $("settings").close(); loadServerInfo(); });
  $("settings-form").addEventListener("submit", (e) => e.preventDefault());
  $("reset-settings").addEventListener("click", () => {
    for (const k of Object.keys(settings)) if (k !== "api_key") delete settings[k];
    saveSettings(settings);
    $("set-system").value = "";
    for (const input of $("sampler-fields").querySelectorAll("input")) input.value = "";
  });
  $("open-tools").addEventListener("click", () => { renderToolList(tools, settings); $("tools-dialog").showModal(); });
  $("close-tools").addEventListener("click", () => $("tools-dialog").close());
  for (const id of ["tools-form", "confirm-form"]) $(id).addEventListener("submit", (e) => e.preventDefault());
}

// ---- wiring ----------------------------------------------------------------------------------

function initComposer() {
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    if (state.controller) return;
    const text = $("input").value.trim();
    if (!text && !state.pending.length) return;
    if (send(text)) $("input").value = "";
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  $("input").addEventListener("paste", (e) => {
    const text = e.clipboardData && e.clipboardData.getData("text/plain");
    const files = e.clipboardData ? [...e.clipboardData.files] : [];
    if (files.length) {
      e.preventDefault();
      addFiles(files);
    } else if (text && text.length > PASTE_LIMIT) {
      e.preventDefault();
      state.pending.push(pastedAttachment(text));
      renderAttachments();
    }
  });
  $("stop").addEventListener("click", stop);
  $("attach").addEventListener("change", (e) => { addFiles([...e.target.files]); e.target.value = ""; });
  // drag and drop anywhere on the chat
  const main = document.querySelector("main");
  main.addEventListener("dragover", (e) => { if (e.dataTransfer.types.includes("Files")) { e.preventDefault(); main.classList.add("dropping"); } });
  main.addEventListener("dragleave", () => main.classList.remove("dropping"));
  main.addEventListener("drop", (e) => {
    main.classList.remove("dropping");
    if (!e.dataTransfer.files.length) return;
    e.preventDefault();
    addFiles([...e.dataTransfer.files]);
  });
}

function newChat() {
  stop();
  state.convId = null;
  renderAll();
  $("input").focus();
}

function initSidebar() {
  $("new-chat").addEventListener("click", newChat);
  $("toggle-sidebar").addEventListener("click", () => showSidebar(!sidebarShown()));
  $("scrim").addEventListener("click", () => showSidebar(false));
  $("search").addEventListener("input", () => { state.query = $("search").value; renderSidebar(); });
  $("search").addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      $("search").value = "";
      state.query = "";
      renderSidebar();
      $("input").focus();
    } else if (e.key === "Enter") {
      const first = visibleConversations()[0];
      if (first) openConversation(first.conv.id);
    }
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
}

function init() {
  initSettings();
  initComposer();
  initSidebar();
  $("model-select").addEventListener("change", () => selectModel($("model-select").value));
  $("model-select").addEventListener("focus", () => server.listModels().then(renderModelSelect).catch(() => {}));
  installShortcuts({
    search: focusSearch,
    toggleSidebar: () => showSidebar(!sidebarShown()),
    newChat,
    rename: () => {
      const li = $("conversations").querySelector("li.active");
      if (li && currentConv()) { showSidebar(true); startRename(li, currentConv()); }
    },
    remove: () => deleteConversation(currentConv()),
    prev: () => stepConversation(-1),
    next: () => stepConversation(+1),
    stop,
  });
  narrow.addEventListener("change", () => { document.body.classList.remove("show-sidebar", "no-sidebar"); $("scrim").hidden = true; });
  // code-block copy buttons live in rendered Markdown: one delegated handler
  $("log").addEventListener("click", (e) => {
    const b = e.target.closest("button.copy-code");
    if (!b) return;
    const code = b.closest(".code-block")?.querySelector("pre code");
    if (code) copyText(code.textContent, b);
  });
  store.onError = (e) => alert(`Could not save the conversations in this browser: ${e.message}. Export and delete some.`);
  window.addEventListener("storage", () => { store.conversations = new Store().conversations; renderAll(); });
  const latest = store.list()[0];
  state.convId = latest ? latest.id : null;
  renderAll();
  loadServerInfo();
  window.llamaUI = { store, settings, state, server, tools };  // for tests and the console
}

init();
