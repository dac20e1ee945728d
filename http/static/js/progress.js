// What the answer is waiting for before its first token: a free slot, or the prompt's
// processing. Two sources: the request's own `prompt_progress` chunks (return_progress:
// {total, cache, processed, time_ms}), and GET /slots polled meanwhile. In /slots, a slot that
// is processing but has decoded nothing yet is evaluating a prompt (ours: we have no token yet);
// when every slot is busy generating, the request is queued.
import { getJSON } from "./api.js";

const FIRST_POLL_MS = 300;
const POLL_MS = 500;

// The line shown in the answer's stats while it waits (empty once tokens come).
export function waitingText(msg) {
  const p = msg.progress;
  if (p && p.total > 0) {
    // the timed part of the work is what the cache did not cover (llama-server's reading)
    const todo = p.total - (p.cache || 0);
    const done = p.processed - (p.cache || 0);
    const pct = todo > 0 ? Math.min(100, Math.round((100 * done) / todo)) : 100;
    return `Processing prompt ${pct}% (${p.processed}/${p.total} tokens${p.cache ? `, ${p.cache} cached` : ""})`;
  }
  const s = msg.slots;
  if (!s) return msg.loading ? `Loading ${msg.loading}…` : "";
  if (s.prefill) {
    const { n_prompt_tokens: total, n_cached_tokens: done } = s.prefill;
    if (total > 0 && done !== undefined) {
      return `Processing prompt ${Math.min(100, Math.round((100 * done) / total))}% (${done}/${total} tokens)`;
    }
    return "Processing prompt…";
  }
  if (s.total > 0 && s.busy >= s.total) return `Waiting for a free slot (${s.busy}/${s.total} busy)`;
  return "";
}

function decoded(slot) {
  const nt = Array.isArray(slot.next_token) ? slot.next_token[0] : slot.next_token;
  return (nt && nt.n_decoded) || 0;
}

// Summarise a GET /slots answer: how many slots are busy, and the slot in prefill, if any.
export function slotsSummary(slots) {
  const busy = slots.filter((s) => s.is_processing);
  const prefill = busy.filter((s) => decoded(s) === 0 && s.n_prompt_tokens !== undefined);
  return { total: slots.length, busy: busy.length, prefill: prefill.length === 1 ? prefill[0] : null };
}

// Poll `slots` until stop() (or a /slots that answers an error: --no-slots); `onSummary` gets
// each summary.
export function watchSlots(query, onSummary) {
  let stopped = false;
  let timer = null;
  const poll = async () => {
    if (stopped) return;
    try {
      const slots = await getJSON("slots" + query);
      if (stopped || !Array.isArray(slots)) return;
      onSummary(slotsSummary(slots));
    } catch {
      return;  // no /slots here: the prompt_progress chunks still tell the progress
    }
    timer = setTimeout(poll, POLL_MS);
  };
  timer = setTimeout(poll, FIRST_POLL_MS);
  return () => { stopped = true; clearTimeout(timer); };
}
