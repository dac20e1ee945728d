"""The numerics of the forward pass: pure functions over NumPy arrays, no state.

`ops` (norms, RoPE, attention, activations), `matmul` (float32), `qmm/` (matmuls on weights in
their GGUF blocks, numba-compiled), `dequant` (every ggml type to float32), `numerics` (the
roundings ggml applies to activations), `pooling`, and
`warmup` (compiling every kernel before the first request)."""

# The numerics modes (core/model/precision.py makes them): named here, where importing costs
# nothing, so that the CLI checks --numerics while it parses.
NUMERICS_MODES = ("ggml", "f32")
