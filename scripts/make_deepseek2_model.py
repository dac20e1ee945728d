"""Dev-only: a mid-size random `deepseek2` GGUF for speed figures (docs/benchmarks.md).

    python scripts/make_deepseek2_model.py OUT.gguf

The tiny test model's keys and tensors (tests/tiny_models.py, write_deepseek2) at DeepSeek-V2-Lite's
attention shapes: n_embd 2048, 16 heads of keys 128 + 64 rope dims and values 128, latent 512
(the absorbed form: a latent cache), plain wq; 4 layers (the first dense, FFN 4096), 16 experts of
1408 rows, top 6, 2 shared; YaRN 40x from 4096; every matrix Q8_0 (~580 MB).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tiny_models import tiny_config, write_deepseek2  # noqa: E402


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    base = tiny_config("deepseek2", "F32")
    cfg = dataclasses.replace(base, n_embd=2048, n_head=16, head_dim=192, n_rot=64, n_ff=4096, n_layer=4,
                              n_expert=16, n_expert_used=6, n_ff_exp=1408, n_ctx_train=4096, yarn=(40.0, 4096),
                              extra={**base.extra, "kv_lora": 512, "head_dim_v": 128})
    path = write_deepseek2(cfg, QT.Q8_0, Path(sys.argv[1]), np.random.default_rng(7))
    print(f"{path} {path.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
