"""The Mamba-2 mixer (llama.cpp's `build_mamba2_layer`, src/models/mamba-base.cpp), a block the
hybrid families compose in place of attention on their recurrent layers.

    zxBCdt = h @ W_in.T                                 (T, 2 d_inner + 2 G N + H)
    z, xBC, dt = the three parts                        (T, d_inner), (T, C), (T, H)
    xBC    = silu(conv1d(xBC) + conv_b)                 causal, kernel W, over each sequence
                                                        (kernels/ssm.ssm_conv; C = d_inner + 2 G N)
    x, B, C = xBC's parts                               (T, H, P), (T, G, N), (T, G, N)
    y      = scan(x, dt + dt_b, A, B, C)                kernels/ssm.ssm_scan, (T, H, P)
    y      = (y + x * D) * silu(z)                      ggml_swiglu_split(z, y)
    y      = rms_norm over each of G groups * norm_w    grouped RMS norm (G groups of d_inner / G)
    out    = y @ W_out.T                                (T, n_embd)

H = `ssm.time_step_rank` heads of P = d_inner / H, N = `ssm.state_size`, G = `ssm.group_count`,
W = `ssm.conv_kernel`. The states (conv: the last W - 1 inputs, scan: (H, P, N)) live in the
cache (state/recurrent.HybridCache), one per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.ssm import ssm_conv, ssm_scan
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.model.weights.tensors import Linear, WeightLoader

if TYPE_CHECKING:
    from llamacli.core.model.precision import Precision


@dataclass(frozen=True)
class Mamba2Args:
    """The `{arch}.ssm.*` keys."""

    d_conv: int  # W
    d_inner: int
    d_state: int  # N
    n_head: int  # H (ssm.time_step_rank)
    n_group: int  # G

    @property
    def head_dim(self) -> int:
        return self.d_inner // self.n_head

    @property
    def conv_dim(self) -> int:  # C
        return self.d_inner + 2 * self.n_group * self.d_state

    @property
    def d_in_proj(self) -> int:
        return 2 * self.d_inner + 2 * self.n_group * self.d_state + self.n_head

    def check(self, path: str, arch: str) -> None:
        for key, v in (("conv_kernel", self.d_conv), ("inner_size", self.d_inner), ("state_size", self.d_state),
                       ("time_step_rank", self.n_head), ("group_count", self.n_group)):
            if v < 1:
                raise ModelLoadError(path, f"{arch}.ssm.{key} is {v}: it must be at least 1")
        if self.d_inner % self.n_head or self.n_head % self.n_group:
            raise ModelLoadError(path, f"{arch}.ssm.inner_size ({self.d_inner}), time_step_rank ({self.n_head}) and "
                                       f"group_count ({self.n_group}) must divide each other in that order")


@dataclass
class Mamba2Weights:
    ssm_in: Linear  # (d_in_proj, n_embd)
    conv_w: np.ndarray  # (C, W) float32
    conv_b: np.ndarray | None  # (C,)
    dt_b: np.ndarray  # (H,)
    A: np.ndarray  # (H,): the decay rates, -exp(A_log) as the converter stores them
    D: np.ndarray  # (H,)
    norm: np.ndarray  # (G, d_inner / G)
    ssm_out: Linear  # (n_embd, d_inner)


def _values(ld: WeightLoader, name: str, n: int) -> np.ndarray:
    """A float tensor of n values in whatever 2-D shape the file gives it ({1, H}, {W, C}, ...)."""
    v = ld.vector(name)
    if v.size != n:
        raise ModelLoadError(ld.gguf.path, f"tensor {name!r} has {v.size} values, expected {n} from the hyperparameters")
    return np.ascontiguousarray(v, dtype=np.float32)


def load_mamba2(ld: WeightLoader, prefix: str, n_embd: int, m: Mamba2Args) -> Mamba2Weights:
    """A layer's `ssm_*` tensors (names as llama.cpp's LLM_TENSOR_SSM_*)."""
    conv_b = ld.vector(prefix + "ssm_conv1d.bias", m.conv_dim) if ld.has(prefix + "ssm_conv1d.bias") else None
    return Mamba2Weights(
        ssm_in=ld.linear(prefix + "ssm_in", n_embd, m.d_in_proj),
        conv_w=_values(ld, prefix + "ssm_conv1d.weight", m.conv_dim * m.d_conv).reshape(m.conv_dim, m.d_conv),
        conv_b=conv_b,
        dt_b=ld.vector(prefix + "ssm_dt.bias", m.n_head),
        A=_values(ld, prefix + "ssm_a", m.n_head),
        D=_values(ld, prefix + "ssm_d", m.n_head),
        norm=_values(ld, prefix + "ssm_norm.weight", m.d_inner).reshape(m.n_group, m.d_inner // m.n_group),
        ssm_out=ld.linear(prefix + "ssm_out", m.d_inner, n_embd),
    )


def mamba2_mixer(pr: Precision, mw: Mamba2Weights, m: Mamba2Args, h: np.ndarray, batch: Batch,
                 cache: HybridCache, il: int, eps: float) -> np.ndarray:
    """The mixer over the batch's rows h (T, n_embd), advancing each sequence's states of
    layer il (and copying them into the checkpoints the cache plans within this batch);
    returns (T, n_embd)."""
    T = h.shape[0]
    E, C, G, N, H, P = m.d_inner, m.conv_dim, m.n_group, m.d_state, m.n_head, m.head_dim
    zxbcdt = pr.linear(h, mw.ssm_in)  # (T, d_in_proj)
    z = zxbcdt[:, :E]
    dt = zxbcdt[:, E + C:] + mw.dt_b  # (T, H)
    xbc = np.empty((T, C), dtype=np.float32)
    y = np.empty((T, H, P), dtype=np.float32)

    def step(rows: np.ndarray | slice) -> None:
        seq = batch.seq_ids[rows]
        xb = ssm_conv(zxbcdt[rows, E:E + C], seq, mw.conv_w, cache.conv[il])  # (t, C)
        if mw.conv_b is not None:
            xb += mw.conv_b
        xb = K.silu(xb)
        xbc[rows] = xb
        t = xb.shape[0]
        y[rows] = ssm_scan(xb[:, :E].reshape(t, H, P), dt[rows], mw.A, xb[:, E:E + G * N].reshape(t, G, N),
                           xb[:, E + G * N:].reshape(t, G, N), seq, cache.ssm[il])

    cache.advance(il, batch.seq_ids, batch.positions, step)
    x = xbc[:, :E].reshape(T, H, P)
    y = y + x * mw.D[:, None]
    y = K.silu(z).reshape(T, H, P) * y
    y = K.rms_norm(y.reshape(T, G, E // G), None, eps) * mw.norm  # grouped RMS norm
    return pr.linear(np.ascontiguousarray(y.reshape(T, E)), mw.ssm_out)
