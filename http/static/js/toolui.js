// The tools' dialogs: the list (which tools the model is offered, which write tools run
// without asking) and the confirmation asked before a write tool runs.
import { saveSettings } from "./settings.js";

const $ = (id) => document.getElementById(id);
export const MAX_TURNS = 10;  // model answers with tool calls in a row before the page asks to go on

function toggle(list, name, on) {
  const set = new Set(list || []);
  if (on) set.add(name);
  else set.delete(name);
  return [...set];
}

export function allowed(settings, name) {
  return (settings.tools_allowed || []).includes(name);
}

export function maxTurns(settings) {
  const n = parseInt(settings.agent_max_turns, 10);
  return n > 0 ? n : MAX_TURNS;
}

// Fill the Tools dialog from `tools.list`; changes are saved in `settings` at once.
export function renderToolList(tools, settings) {
  const ul = $("tool-list");
  ul.replaceChildren();
  for (const t of tools.list) {
    const li = document.createElement("li");
    li.dataset.tool = t.tool;
    const on = document.createElement("input");
    on.type = "checkbox";
    on.className = "tool-enabled";
    on.checked = !(settings.tools_disabled || []).includes(t.tool);
    on.addEventListener("change", () => {
      settings.tools_disabled = toggle(settings.tools_disabled, t.tool, !on.checked);
      saveSettings(settings);
    });
    const name = document.createElement("label");
    name.className = "tool-name";
    name.append(on, ` ${t.display_name || t.tool}`);
    const desc = document.createElement("div");
    desc.className = "tool-desc";
    desc.textContent = (t.definition.function && t.definition.function.description) || "";
    li.append(name);
    if (tools.writes(t.tool)) {
      const ask = document.createElement("label");
      ask.className = "tool-allow";
      const box = document.createElement("input");
      box.type = "checkbox";
      box.checked = allowed(settings, t.tool);
      box.addEventListener("change", () => {
        settings.tools_allowed = toggle(settings.tools_allowed, t.tool, box.checked);
        saveSettings(settings);
      });
      ask.append(box, " run without asking");
      li.append(ask);
    }
    li.append(desc);
    ul.appendChild(li);
  }
  const turns = $("set-agent_max_turns");
  turns.value = settings.agent_max_turns || "";
  turns.oninput = () => {
    if (turns.value === "") delete settings.agent_max_turns;
    else settings.agent_max_turns = turns.value;
    saveSettings(settings);
  };
}

// Ask before `call` runs: "run", "always" (and remember it) or "deny" (Escape too).
export function confirmTool(call, settings) {
  const dlg = $("tool-confirm");
  $("confirm-name").textContent = call.name;
  let args = call.arguments;
  try {
    args = JSON.stringify(JSON.parse(call.arguments), null, 2);
  } catch { /* shown as the model wrote it */ }
  $("confirm-args").textContent = args;
  return new Promise((resolve) => {
    const done = (answer) => {
      for (const [id, fn] of handlers) $(id).removeEventListener("click", fn);
      dlg.removeEventListener("cancel", onCancel);
      if (dlg.open) dlg.close();
      if (answer === "always") {
        settings.tools_allowed = toggle(settings.tools_allowed, call.name, true);
        saveSettings(settings);
      }
      resolve(answer);
    };
    const handlers = [["confirm-run", () => done("run")], ["confirm-always", () => done("always")], ["confirm-deny", () => done("deny")]];
    const onCancel = (e) => { e.preventDefault(); done("deny"); };
    for (const [id, fn] of handlers) $(id).addEventListener("click", fn);
    dlg.addEventListener("cancel", onCancel);
    dlg.showModal();
    $("confirm-deny").focus();
  });
}
