"""The quantized kernels on an emulated aarch64 CPU: the same bits as this machine's?

    python scripts/check_aarch64_bits.py --python ARM_PYTHON [--qemu "qemu-aarch64 -cpu max -L ROOT"]
                                         [--site DIR] [--targets generic,dotprod] [--types Q4_0,...]
                                         [--opt N] [--cache-dir DIR]

Not a test (CI has no aarch64 Python): a check to run by hand where qemu-user and an aarch64
Python with numpy, numba and gguf are at hand (docs/benchmarks.md says how one was set up, and
what it gave). A few matmuls per weight type (Q4_K, Q6_K, Q8_0, Q4_0 stored and packed, IQ4_NL;
one and several activation rows, with a block of Q8_0 codes -128) are made here, computed by
this machine's numba target, then by the aarch64 Python under qemu for each aarch64 target:

  generic   NUMBA_CPU_NAME=generic, NEON only: the products written out (isa.py's `generic`)
  dotprod   NUMBA_CPU_NAME=neoverse-n1, +dotprod: the byte products as sdot (`neon-dotprod`)

and their float32 results compared bit for bit. Exit status 0 when every target gave every
case's bits, 1 otherwise. Emulated, numba's compiler is slow: with --opt 0 (the bits do not
depend on LLVM's optimisation: exact integers, floats in a fixed order) each target took about
25 minutes on a loaded 2-core machine; the cases are small and few, and --cache-dir keeps the
compiled kernels for a second run (one folder per optimisation level: numba's cache key does
not hold it). Nothing is timed (emulated time says nothing about an ARM CPU).

  python scripts/check_aarch64_bits.py --compute INPUTS.npz OUT.npz   (the side run on each target)
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

# (numba CPU name, features) of each aarch64 target; features named, as a real host's would be
TARGETS = {
    "generic": ("generic", "+neon,+fp-armv8"),
    "dotprod": ("neoverse-n1", "+neon,+fp-armv8,+dotprod"),
}
TYPES = ("Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_NL")
PACKABLE = {"Q4_K", "Q6_K", "Q8_0", "Q4_0"}
ROWS = (1, 5)  # one activation row (decode), several (the 16-row and packed kernels' many-row code)


def make_inputs(path: Path, types: tuple[str, ...]) -> None:
    """Each type's matrix (ggml bytes, 40 x 512: a multiple of 8 rows, and 16-row tiles with a
    tail) and the activations, saved for every side to read (no side quantizes weights)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT

    from llamacli.core.quantize.convert import encode

    rng = np.random.default_rng(29)
    n_out, n_in = 40, 512
    arrays: dict[str, Any] = {}  # (Any: numpy's stub of savez reads ** as its allow_pickle)
    for name in types:
        qt = QT[name]
        qk, size = GGML_QUANT_SIZES[qt]
        if name == "IQ4_NL":  # no quantizer: random codes, fp16 d = 0.01
            blocks = rng.integers(0, 256, size=(n_out, n_in // qk, size), dtype=np.uint8)
            blocks[:, :, 0:2] = np.array([0.01], dtype=np.float16).view(np.uint8)
            arrays[name + ".w"] = blocks.reshape(n_out, -1)
        else:
            w = rng.standard_normal((n_out, n_in)).astype(np.float32) * 0.05
            arrays[name + ".w"] = np.ascontiguousarray(encode(w, qt)).view(np.uint8).reshape(n_out, -1)
    x = rng.standard_normal((max(ROWS), n_in)).astype(np.float32)
    x[1, 32:64] = 1e-39  # Q8_0 activation codes -128 (127 / amax overflows; d rounds to 0)
    arrays["x"] = x
    np.savez(path, **arrays)


def compute(inputs: Path, out: Path) -> str:
    """Every case's result on this process's numba target, saved as each is done (a run cut
    short leaves the cases it finished); returns the isa path taken."""
    from gguf import GGMLQuantizationType as QT
    from numba.core.registry import cpu_target

    from llamacli.core.model.kernels.qmm import QuantMatrix, matmul, prepare
    from llamacli.core.model.kernels.qmm.isa import target_path
    from llamacli.core.model.kernels.qmm.matrix import pack_matrix

    z = np.load(inputs)
    x = z["x"]
    results: dict[str, Any] = {}
    for name in (k[:-2] for k in z.files if k.endswith(".w")):
        qt = QT[name]
        w = z[name + ".w"]
        layouts = ("stored", "packed") if name in PACKABLE else ("stored",)
        for layout in layouts:
            m = QuantMatrix(w, qt, x.shape[1])
            if layout == "packed" and not pack_matrix(m):
                raise SystemExit(f"{name}: the matrix did not pack")
            for rows in ROWS:
                results[f"{name} {layout} rows={rows}"] = matmul(prepare(x[:rows], qt), m)
                np.savez(out.with_suffix(".part.npz"), **results)
                os.replace(out.with_suffix(".part.npz"), out)  # whole, were the run stopped now
    return target_path(cpu_target.target_context)


def _compare(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> list[str]:
    """One line per case: equal bits, or how many elements differ and by how many ulps at most."""
    lines = []
    for case, a in want.items():
        if case not in got:
            lines.append(f"  {case}: not computed (the run was cut short)")
            continue
        b = got[case]
        same = a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
        if same:
            lines.append(f"  {case}: same bits ({a.size} values)")
        else:
            ulps = np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))
            lines.append(f"  {case}: DIFFERENT, {int((ulps != 0).sum())} of {a.size} values, up to {int(ulps.max())} ulp")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compute", nargs=2, metavar=("INPUTS", "OUT"), help="compute the cases on this target (the side run)")
    ap.add_argument("--python", help="the aarch64 Python (with numpy, numba, gguf)")
    ap.add_argument("--qemu", default="qemu-aarch64 -cpu max", help="the emulator's command line, before the Python")
    ap.add_argument("--targets", default=",".join(TARGETS), help="aarch64 targets to run: " + ", ".join(TARGETS))
    ap.add_argument("--site", help="PYTHONPATH of the aarch64 Python (packages installed with pip --target)")
    ap.add_argument("--types", default=",".join(TYPES), help="weight types (of " + ", ".join(TYPES) + ")")
    ap.add_argument("--opt", help="NUMBA_OPT for the emulated runs (0: LLVM's optimiser off, the compile some times faster)")
    ap.add_argument("--timeout", type=float, help="seconds for each emulated run; then the cases it finished are compared")
    ap.add_argument("--cache-dir", help="numba's cache for the emulated runs (one folder per target); default: a temporary one")
    args = ap.parse_args()
    if args.compute:
        print("path", compute(Path(args.compute[0]), Path(args.compute[1])))
        return 0
    if not args.python:
        ap.error("--python (an aarch64 Python) is required")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cache = Path(args.cache_dir) if args.cache_dir else work / "numba-cache"
        make_inputs(work / "inputs.npz", tuple(args.types.split(",")))
        host_path = compute(work / "inputs.npz", work / "host.npz")
        want = dict(np.load(work / "host.npz"))
        print(f"this machine ({host_path} path): {len(want)} cases")
        ok = True
        for target in args.targets.split(","):
            cpu, features = TARGETS[target]
            env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features, NUMBA_CACHE_DIR=str(cache / target))
            if args.site:
                env["PYTHONPATH"] = args.site
            if args.opt is not None:
                env["NUMBA_OPT"] = args.opt
            out = work / f"{target}.npz"
            cmd = [*shlex.split(args.qemu), args.python, str(Path(__file__).resolve()), "--compute", str(work / "inputs.npz"), str(out)]
            try:
                run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
                status = run.stdout.split()[-1] + " path" if run.returncode == 0 else f"failed, exit {run.returncode}"
                if run.returncode != 0:
                    print(run.stderr[-3000:])
            except subprocess.TimeoutExpired:
                status = f"cut short after {args.timeout:.0f} s"
            ok = ok and status.endswith("path")
            got = dict(np.load(out)) if out.exists() else {}
            lines = _compare(want, got)
            opt = "" if args.opt is None else f" NUMBA_OPT={args.opt}"
            print(f"aarch64 {target} ({status}), NUMBA_CPU_NAME={cpu} NUMBA_CPU_FEATURES={features}{opt}:")
            print("\n".join(lines))
            ok = ok and not any("DIFFERENT" in line or "not computed" in line for line in lines)
        print("all the same bits" if ok else "NOT all the same bits")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
