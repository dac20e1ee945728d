"""The model half of the engine (llama.cpp's libllama): a GGUF file in, logits or embeddings out.

- `weights/`: the GGUF container (header, metadata, memory-mapped tensors) and the weights as
  the numerics mode multiplies them.
- `kernels/`: the numerics: dequantization, activation roundings, the float and the quantized
  (`qmm/`, numba-compiled) matmuls, the transformer's pure array operations, pooling.
- `families/`: one module per architecture (`general.architecture`) over a shared decoder.
- `state/`: what a forward pass reads and writes per sequence: the batch, the KV cache, LoRA
  adapters.
- `precision`: the numerics modes (`f32`, `ggml`): how a forward pass multiplies its weights.
- `load`, `loaded`: open a GGUF file as a model (`load`), with its tokenizer and chat template
  (`loaded`); `bench`: llama-bench's throughput measurements of the forward pass.

Nothing here imports `runtime/` or the drivers."""
