"""The serving runtime (llama.cpp's `server-*` side): tasks, slots, the scheduler and the
engine loop that drives a loaded model. Nothing here parses HTTP or CLI arguments."""
