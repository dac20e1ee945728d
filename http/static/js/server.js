// What the page knows of the server: single model or router (llama-server's ROUTER mode), the
// router's models and their status, each model's /props (context, slots, modalities).
//
// Router mode: GET /props says {"role": "router"}; GET /models lists every model with
// status.value unloaded | loading | loaded | sleeping | unloading; POST /models/load starts one
// (the page then polls /models until it is loaded or failed); /props?model=NAME is that model's
// own /props. A chat request names its model in the body.
import { ApiError, getJSON, postJSON } from "./api.js";

const POLL_MS = 400;

export function baseName(p) {
  const s = String(p || "");
  return s.split(/[\\/]/).pop().replace(/\.gguf$/i, "") || s;
}

export class Server {
  constructor() {
    this.router = false;
    this.props = null;  // the server's /props (router: the router's own)
    this.models = [];  // router: GET /models data
    this.modelProps = {};  // router: model id -> its /props
    this.name = "";  // single model: its name
  }

  // GET /props (and, in router mode, /models). Throws ApiError (401: the key is missing).
  async refresh() {
    this.props = await getJSON("props");
    this.router = this.props.role === "router";
    if (this.router) await this.listModels();
    return this;
  }

  async listModels() {
    const j = await getJSON("models");
    this.models = Array.isArray(j.data) ? j.data : [];
    return this.models;
  }

  status(id) {
    const m = this.models.find((x) => x.id === id);
    return m && m.status ? m.status.value : "";
  }

  isLoaded(id) {
    return ["loaded", "sleeping"].includes(this.status(id));
  }

  // Load `id` unless it runs already, reporting each status seen; resolves once it is loaded
  // (its /props read), throws when it failed (with its last log line) or on abort.
  async ensureLoaded(id, onStatus = () => {}, signal) {
    await this.listModels();
    if (!this.isLoaded(id)) {
      if (!["loading", "unloading"].includes(this.status(id))) {
        try {
          await postJSON("models/load", { model: id }, signal);
        } catch (e) {
          if (!(e instanceof ApiError && e.status === 400)) throw e;  // "already running": wait for it
        }
      }
      for (;;) {
        await this.listModels();
        const m = this.models.find((x) => x.id === id);
        if (!m) throw new Error(`model ${id} is not on this server`);
        const s = m.status || {};
        if (this.isLoaded(id)) break;
        if (s.value === "unloaded" && s.failed) {
          const why = (s.log || []).filter((l) => l.trim()).pop() || `exit code ${s.exit_code}`;
          throw new Error(`${id} failed to load: ${why}`);
        }
        onStatus(s.value);
        await sleep(POLL_MS, signal);
      }
    }
    if (!this.modelProps[id]) this.modelProps[id] = await getJSON(`props?model=${encodeURIComponent(id)}&autoload=false`, signal);
    return this.modelProps[id];
  }

  // The /props that describe `model` (router: the model's own, once read; else the server's).
  propsOf(model) {
    return this.router ? this.modelProps[model] || null : this.props;
  }

  // What `model` takes besides text: {vision, audio}, from its /props, else (a router's model
  // not loaded yet) from its /models entry's architecture.input_modalities.
  modalities(model) {
    const p = this.propsOf(model);
    if (p && p.modalities) return { vision: !!p.modalities.vision, audio: !!p.modalities.audio };
    const entry = this.models.find((x) => x.id === model);
    const inputs = (entry && entry.architecture && entry.architecture.input_modalities) || [];
    return { vision: inputs.includes("image"), audio: inputs.includes("audio") };
  }

  // A query string naming the model in router mode (GET routes are forwarded by ?model=).
  modelQuery(model) {
    return this.router && model ? `?model=${encodeURIComponent(model)}` : "";
  }
}

export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    if (signal) {
      signal.addEventListener("abort", () => { clearTimeout(t); reject(new DOMException("aborted", "AbortError")); }, { once: true });
    }
  });
}
