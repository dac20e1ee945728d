"""`llama chat`: an interactive REPL and a pipe mode over the in-process engine.

Modules, from the model outwards:
  conversation  the messages (system prompt + turns), undo/retry, JSON save/load
  settings      per-turn generation settings and `/set PARAM VALUE` parsing
  session       conversation -> prompt tokens -> engine task -> streamed reply (+ stats)
  render        views: how a reply, the stats footer, info and errors are shown
  commands      the slash commands (/help, /set, /save, ...), a table the REPL dispatches on
  repl          the loop: read a line, run a command or a turn, Ctrl-C / Ctrl-D rules
  prompt        the prompt-toolkit input (history file, completion, multiline keys)
  pipes         stdin is not a terminal: one answer (plain, --json) or one per line (--jsonl)

The loop only sees a `read()` function and a `View`, so tests drive it with scripted input.
"""
