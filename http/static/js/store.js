// Conversations as message trees, persisted in localStorage.
//
// A conversation: {id, name, created, updated, messages: {id: Message}, roots: [id], leaf: id|null}.
// A message: {id, parent, children: [id], role, content, reasoning, toolCalls, attachments,
// stats, error, stopped, model}. A tool call: {id, name, arguments, state, result} (result: the
// text the model got back). An answer that called tools is followed by the assistant message
// that goes on from their results (its child). Editing a user message or regenerating an
// answer adds a sibling, so every earlier version stays reachable (branch navigation); `leaf`
// is the end of the branch shown.

const KEY = "llamacli.conversations.v1";

export function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

export class Store {
  constructor(storage = window.localStorage) {
    this.storage = storage;
    this.conversations = load(storage);
  }

  // A full storage (images and audio fill it fastest) is reported to onError, once per save.
  save() {
    try {
      this.storage.setItem(KEY, JSON.stringify(this.conversations));
    } catch (e) {
      if (this.onError) this.onError(e);
      else throw e;
    }
  }

  list() {
    return Object.values(this.conversations).sort((a, b) => b.updated - a.updated);
  }

  get(id) {
    return this.conversations[id] || null;
  }

  create(name = "New chat") {
    const now = Date.now();
    const conv = { id: newId(), name, created: now, updated: now, messages: {}, roots: [], leaf: null };
    this.conversations[conv.id] = conv;
    return conv;
  }

  remove(id) {
    delete this.conversations[id];
    this.save();
  }

  rename(id, name) {
    const conv = this.get(id);
    if (conv && name.trim()) {
      conv.name = name.trim();
      this.save();
    }
  }

  // Add a message under `parentId` (null: a new root) and make it the leaf.
  add(conv, parentId, fields) {
    const msg = { id: newId(), parent: parentId, children: [], content: "", attachments: [], ...fields };
    conv.messages[msg.id] = msg;
    (parentId ? conv.messages[parentId].children : conv.roots).push(msg.id);
    conv.leaf = msg.id;
    conv.updated = Date.now();
    return msg;
  }

  // The messages from the root to the leaf.
  path(conv) {
    const out = [];
    for (let id = conv.leaf; id; id = conv.messages[id].parent) out.unshift(conv.messages[id]);
    return out;
  }

  siblings(conv, msg) {
    return msg.parent ? conv.messages[msg.parent].children : conv.roots;
  }

  // Show the sibling branch `step` away from `msg`, down to that branch's newest leaf.
  switchBranch(conv, msg, step) {
    const sibs = this.siblings(conv, msg);
    const i = sibs.indexOf(msg.id) + step;
    if (i < 0 || i >= sibs.length) return;
    let id = sibs[i];
    while (conv.messages[id].children.length) {
      const kids = conv.messages[id].children;
      id = kids[kids.length - 1];
    }
    conv.leaf = id;
    this.save();
  }

  exportJSON() {
    return JSON.stringify({ format: "llamacli-conversations", version: 1, conversations: this.list() }, null, 1);
  }

  // Add the conversations of an export (new ids when they clash); the number added.
  importJSON(text) {
    const data = JSON.parse(text);
    const convs = Array.isArray(data) ? data : data.conversations;
    if (!Array.isArray(convs)) throw new Error("not a conversations export (no 'conversations' list)");
    let n = 0;
    for (const c of convs) {
      if (!c || typeof c !== "object" || typeof c.messages !== "object" || !Array.isArray(c.roots)) {
        throw new Error("not a conversations export (a conversation lacks messages/roots)");
      }
      const conv = { ...c, name: String(c.name || "Imported chat") };
      if (this.conversations[conv.id]) conv.id = newId();
      this.conversations[conv.id] = conv;
      n += 1;
    }
    this.save();
    return n;
  }
}

function load(storage) {
  try {
    const data = JSON.parse(storage.getItem(KEY) || "{}");
    return data && typeof data === "object" ? data : {};
  } catch {
    return {};
  }
}
