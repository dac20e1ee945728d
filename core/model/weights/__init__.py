"""GGUF files and their weights: the container parsed and memory-mapped (`gguf_file`), the
tensors as the numerics mode multiplies them (`tensors`)."""
