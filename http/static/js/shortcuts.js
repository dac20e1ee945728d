// llama-server's web UI keyboard shortcuts (Ctrl on Linux/Windows, Cmd on macOS):
//   Ctrl/Cmd+K          search conversations      Ctrl/Cmd+B          toggle the sidebar
//   Shift+Ctrl/Cmd+O    new chat                  Shift+Ctrl/Cmd+E    rename the conversation
//   Shift+Ctrl/Cmd+D    delete the conversation   Shift+Ctrl/Cmd+↑/↓  previous/next conversation
//   Escape              stop the answer (when no dialog or search box has the key)

export const SHORTCUTS = [
  ["Ctrl/Cmd+K", "Search conversations"],
  ["Ctrl/Cmd+B", "Toggle the sidebar"],
  ["Shift+Ctrl/Cmd+O", "New chat"],
  ["Shift+Ctrl/Cmd+E", "Rename the conversation"],
  ["Shift+Ctrl/Cmd+D", "Delete the conversation"],
  ["Shift+Ctrl/Cmd+↑ / ↓", "Previous / next conversation"],
  ["Escape", "Stop the answer"],
];

// Install the handler; `actions` holds search, toggleSidebar, newChat, rename, remove,
// prev, next and stop.
export function installShortcuts(actions) {
  document.addEventListener("keydown", (e) => {
    const mod = e.ctrlKey || e.metaKey;
    const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    let act = null;
    if (mod && !e.shiftKey && !e.altKey) act = { k: actions.search, b: actions.toggleSidebar }[key];
    else if (mod && e.shiftKey && !e.altKey) {
      act = { o: actions.newChat, e: actions.rename, d: actions.remove, ArrowUp: actions.prev, ArrowDown: actions.next }[key];
    } else if (key === "Escape" && !mod && !e.shiftKey && !document.querySelector("dialog[open]")) {
      if (e.target.closest && e.target.closest("#sidebar")) return;  // the search box's own Escape
      act = actions.stop;
    }
    if (!act) return;
    e.preventDefault();
    act();
  });
}
