"""The engine, imported as `llamacli.core`. Two halves, as llama.cpp splits libllama from its
server, and the pieces both use:

- `model/`: a GGUF file to logits (weights, kernels, model families, per-sequence state);
- `runtime/`: the serving loop that drives it (tasks, slots, scheduler, engine);
- `text/`: tokenizer, chat templates, grammars, tool calls, reasoning;
- `sampling/`: llama.cpp's sampler chain; `speculative/`: drafting and verifying tokens;
- `quantize/`: `llama quantize` (GGUF in, GGUF out); `errors`: the exception hierarchy.

Imports run down: runtime -> speculative -> model, sampling, text -> errors.
Nothing here imports the drivers (llamacli's CLI or http/)."""
