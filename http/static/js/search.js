// Conversation search (Ctrl/Cmd+K): by title or by the text of any message, in every branch.

const CONTEXT = 40;  // characters shown either side of a match in a message

// The conversations matching `query` (case-insensitive), in `convs`' order, each with the
// snippet of its first matching message: {conv, snippet: {before, match, after} | null}.
// An empty query matches every conversation, without snippets.
export function searchConversations(convs, query) {
  const q = query.trim().toLowerCase();
  if (!q) return convs.map((conv) => ({ conv, snippet: null }));
  const out = [];
  for (const conv of convs) {
    if (conv.name.toLowerCase().includes(q)) {
      out.push({ conv, snippet: null });
      continue;
    }
    for (const m of Object.values(conv.messages || {})) {
      const text = String(m.content || "");
      const i = text.toLowerCase().indexOf(q);
      if (i < 0) continue;
      const start = Math.max(0, i - CONTEXT);
      const end = Math.min(text.length, i + q.length + CONTEXT);
      out.push({
        conv,
        snippet: {
          before: (start > 0 ? "…" : "") + text.slice(start, i),
          match: text.slice(i, i + q.length),
          after: text.slice(i + q.length, end) + (end < text.length ? "…" : ""),
        },
      });
      break;
    }
  }
  return out;
}
