"""The KV cache of multi-head latent attention in its absorbed form (deepseek2 files with
`attn_k_b` / `attn_v_b`), as llama.cpp keeps it (llama-kv-cache.cpp, `is_mla`): per layer and
token one row [normed latent c (kv_lora_rank), roped key k_pe (n_rot)] shared by every head,
and no V tensor: the values are the row's first kv_lora_rank entries (a view of K).

    k[layer]: (n_seq, 1, n_ctx, kv_lora_rank + n_rot)      v[layer] = k[layer][..., :kv_lora_rank]

So a cell costs (kv_lora_rank + n_rot) values per layer (576 for DeepSeek-V2/V3), against
n_head * (key + value length) for the same model decompressed.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.model.state.kv_cache import KVCache


class LatentKVCache(KVCache):
    def __init__(self, n_layer: int, n_seq: int, n_ctx: int, kv_lora_rank: int, n_rot: int) -> None:
        super().__init__(n_layer, n_seq, n_ctx, 1, kv_lora_rank + n_rot, 0)
        self.kv_lora_rank = kv_lora_rank
        self.v = [k[..., :kv_lora_rank] for k in self.k]  # views: nothing of their own

    def write(self, layer: int, seq_ids: np.ndarray, positions: np.ndarray, k: np.ndarray, v: np.ndarray | None) -> None:
        """Store the rows k (T, 1, kv_lora_rank + n_rot); the values are their first part."""
        self.k[layer][seq_ids, :, positions] = k

    def copy_seq(self, src: int, dst: int, n: int | None = None) -> None:
        n = int(self.lengths[src]) if n is None else n
        for layer in range(self.n_layer):
            self.k[layer][dst, :, :n] = self.k[layer][src, :, :n]
        self.lengths[dst] = n

    @property
    def nbytes_used(self) -> int:
        per_cell = sum(k.shape[1] * k.shape[3] * 4 for k in self.k)
        return int(self.lengths.sum()) * per_cell
