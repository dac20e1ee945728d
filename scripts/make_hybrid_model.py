"""Dev-only: a mid-size random `granitehybrid` GGUF for speed figures (docs/benchmarks.md).

    python scripts/make_hybrid_model.py OUT.gguf

The tiny test model's keys and tensors (tests/tiny_models.py, write_granitehybrid) at larger
shapes: n_embd 1024, 8 layers (attention at 2 and 6, 16 heads of 64, 4 KV heads), FFN 2048,
Mamba-2 with 32 heads of 64, state 128, group 1, kernel 4; every matrix Q8_0 (~100 MB).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tiny_models import tiny_config, write_granitehybrid  # noqa: E402


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    base = tiny_config("granitehybrid", "Q8_0")
    cfg = dataclasses.replace(base, n_embd=1024, n_layer=8, n_head=16, n_head_kv=4, head_dim=64, n_ff=2048,
                              extra={**base.extra, "attn_layers": (2, 6), "d_state": 128, "ssm_heads": 32})
    path = write_granitehybrid(cfg, QT.Q8_0, Path(sys.argv[1]), np.random.default_rng(7))
    print(f"{path} {path.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
