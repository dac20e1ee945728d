"""Per-sequence state of a forward pass: the unified batch (`batch`), the KV cache
(`kv_cache`) and the LoRA adapters applied to the weights (`lora`)."""
