// Settings: the system prompt, the API key and every sampler llama-server takes, persisted in
// localStorage. An empty field means "the server's default" and is not sent.

const KEY = "llamacli.settings.v1";

// [request field, label, kind, key in /props default_generation_settings.params]
export const SAMPLERS = [
  ["max_tokens", "Max tokens", "int", "n_predict"],
  ["temperature", "Temperature", "float", "temperature"],
  ["top_k", "Top-k", "int", "top_k"],
  ["top_p", "Top-p", "float", "top_p"],
  ["min_p", "Min-p", "float", "min_p"],
  ["typical_p", "Typical-p", "float", "typical_p"],
  ["top_n_sigma", "Top-n-sigma", "float", "top_n_sigma"],
  ["dynatemp_range", "Dyn. temp range", "float", "dynatemp_range"],
  ["dynatemp_exponent", "Dyn. temp exponent", "float", "dynatemp_exponent"],
  ["repeat_penalty", "Repeat penalty", "float", "repeat_penalty"],
  ["repeat_last_n", "Repeat last n", "int", "repeat_last_n"],
  ["presence_penalty", "Presence penalty", "float", "presence_penalty"],
  ["frequency_penalty", "Frequency penalty", "float", "frequency_penalty"],
  ["dry_multiplier", "DRY multiplier", "float", "dry_multiplier"],
  ["dry_base", "DRY base", "float", "dry_base"],
  ["dry_allowed_length", "DRY allowed length", "int", "dry_allowed_length"],
  ["dry_penalty_last_n", "DRY last n", "int", "dry_penalty_last_n"],
  ["xtc_probability", "XTC probability", "float", "xtc_probability"],
  ["xtc_threshold", "XTC threshold", "float", "xtc_threshold"],
  ["mirostat", "Mirostat (0/1/2)", "int", "mirostat"],
  ["mirostat_tau", "Mirostat tau", "float", "mirostat_tau"],
  ["mirostat_eta", "Mirostat eta", "float", "mirostat_eta"],
  ["seed", "Seed (-1 random)", "int", "seed"],
];

export function loadSettings(storage = window.localStorage) {
  try {
    const s = JSON.parse(storage.getItem(KEY) || "{}");
    return s && typeof s === "object" ? s : {};
  } catch {
    return {};
  }
}

export function saveSettings(settings, storage = window.localStorage) {
  storage.setItem(KEY, JSON.stringify(settings));
}

// The sampler fields of a chat request: only those the user set, as numbers.
export function samplerParams(settings) {
  const out = {};
  for (const [name, , kind] of SAMPLERS) {
    const raw = settings[name];
    if (raw === undefined || raw === null || String(raw).trim() === "") continue;
    const v = kind === "int" ? parseInt(raw, 10) : parseFloat(raw);
    if (Number.isFinite(v)) out[name] = v;
  }
  return out;
}

// llama-server reports a random seed as LLAMA_DEFAULT_SEED (0xFFFFFFFF); the field's label
// calls it -1, and so does its placeholder.
const RANDOM_SEED = 4294967295;

// The placeholder of a field: the server's default as the field spells it.
export function defaultText(name, d) {
  if (name === "seed" && (d === RANDOM_SEED || d === -1)) return "-1";
  return String(d);
}

// Build the sampler inputs into `fieldset`; placeholders show the server's defaults.
export function buildSamplerFields(fieldset, settings, defaults, onChange) {
  for (const [name, label, kind, propsKey] of SAMPLERS) {
    const lab = document.createElement("label");
    lab.textContent = label;
    const input = document.createElement("input");
    input.type = "number";
    input.id = "set-" + name;
    input.name = name;
    input.step = kind === "int" ? "1" : "any";
    input.value = settings[name] ?? "";
    const d = defaults ? defaults[propsKey] : undefined;
    if (d !== undefined && d !== null) input.placeholder = defaultText(name, d);
    input.addEventListener("input", () => onChange(name, input.value));
    lab.appendChild(input);
    fieldset.appendChild(lab);
  }
}

export function setPlaceholders(fieldset, defaults) {
  for (const [name, , , propsKey] of SAMPLERS) {
    const input = fieldset.querySelector("#set-" + name);
    const d = defaults ? defaults[propsKey] : undefined;
    if (input && d !== undefined && d !== null) input.placeholder = defaultText(name, d);
  }
}
