"""The engine: GGUF loading, NumPy kernels, models, tokenizers. Imported as `llamacli.core`.

Nothing here imports the drivers (llamacli's CLI or http/)."""
