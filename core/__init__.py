"""The engine, imported as `llamacli.core`. Two halves, as llama.cpp splits libllama from its
server: the model (gguf_file, weights, dequant, qmm, kernels, models/, tokenizer/,
chat_templates/, sampling/, grammar/) and the serving runtime that drives it (runtime/:
tasks, slots, scheduler, engine loop).

Nothing here imports the drivers (llamacli's CLI or http/)."""
