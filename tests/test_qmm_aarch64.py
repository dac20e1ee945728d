"""The quantized kernels build for aarch64 (no ARM machine here: code generation only).

numba generates a kernel's LLVM IR from its Python and the target's features; on an aarch64
machine the kernels take the `generic` path of core/model/kernels/qmm/isa.py (no x86 byte
product is called by name: the products are written out, as LLVM vectors). A child process
compiles the type functions for an x86 CPU on that same path, unoptimised (NUMBA_OPT=0, so
that no x86-specific intrinsic enters the IR), and hands back their IR; here the IR is
retargeted to aarch64 (triple and data layout), optimised at O3 by LLVM's pass pipeline for a
Neoverse N1 (NEON and the dot-product extension) and emitted as an ELF object for AArch64.
What this checks: the kernels' code builds for aarch64 and its integer products come out as
NEON vector instructions. What it cannot: that the object runs and gives the same bits
(docs/benchmarks.md says what was and was not measured on ARM; scripts/check_aarch64_bits.py
runs the kernels on an emulated aarch64 CPU and compares their bits with this machine's).

The `neon-dotprod` path (aarch64 with the dot product extension): the child compiles for an x86
CPU whose feature list also names `+dotprod` (LLVM's x86 back end ignores it; isa.Target reads
it), with the sdot intrinsic under a stand-in name that x86 can link (an x86 back end cannot
select an aarch64 intrinsic); the IR gets the intrinsic's name back before the aarch64 build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial
from pathlib import Path

import pytest

from tests.side_runs import selected, together

_TRIPLE = "aarch64-unknown-linux-gnu"

# The child: the kernels' IR, compiled for Ivy Bridge (AVX and F16C, no AVX2: the generic path,
# as tests/test_qmm.py compiles it) without optimisation.
_IR_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from numba.core.registry import cpu_target
from llamacli.core.model.kernels.qmm import decode, prefill, unpack as U
from llamacli.core.model.kernels.qmm.isa import target_path
fns = {
    "decode_rows_q4_k": decode.type_function(U.Q4_K),
    "decode_rows_q6_k": decode.type_function(U.Q6_K),
    "decode_rows_q4_0": decode.type_function(U.Q4_0),
    "decode_rows_q8_0": decode.type_function(U.Q8_0),
    "decode_packed_q5_0": decode.type_function(U.Q5_0, packed=True),
    "decode_packed_q8_0": decode.type_function(U.Q8_0, packed=True),
    "decode_packed_q4_k": decode.type_function(U.Q4_K, packed=True),
    "decode_packed_q6_k": decode.type_function(U.Q6_K, packed=True),
    "prefill_rows_q4_k": prefill.type_function(U.Q4_K),
}
names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(fns)
json.dump({"path": target_path(cpu_target.target_context), "ir": {k: fns[k].inspect_llvm() for k in names}}, open(sys.argv[2], "w"))
"""
# The stand-in: isa.SDOT renamed to a symbol that exists (never called: nothing runs here).
_STAND_IN = "llamacli_sdot_stand_in"
_DOTPROD_PRELUDE = f"""
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import llvmlite.binding as ll
from llamacli.core.model.kernels.qmm import isa
isa.SDOT = "{_STAND_IN}"
_slot = ctypes.c_int(0)
ll.add_symbol(isa.SDOT, ctypes.addressof(_slot))
"""
_GENERIC = "+sse4.2,+popcnt,+avx,+f16c,-avx2,-fma,-bmi2,-avxvnni,-avx512f,-avx512bw,-avx512dq,-avx512cd,-avx512vl,-avx512vnni"


def _aarch64_object(ir_text: str) -> tuple[bytes, str]:
    """`ir_text` compiled for aarch64 at O3: (ELF object, assembly)."""
    import llvmlite.binding as ll

    ll.initialize_all_targets()
    ll.initialize_all_asmprinters()
    tm = ll.Target.from_triple(_TRIPLE).create_target_machine(cpu="neoverse-n1", features="+neon,+dotprod", opt=3, reloc="pic")
    ir_text = re.sub(r'target datalayout = ".*"', f'target datalayout = "{tm.target_data}"', ir_text)
    ir_text = re.sub(r'target triple = ".*"', f'target triple = "{_TRIPLE}"', ir_text)
    mod = ll.parse_assembly(ir_text)
    mod.verify()
    pb = ll.create_pass_builder(tm, ll.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_object(mod), tm.emit_assembly(mod)


def _kernels_ir(tmp_path: Path, features: str, prelude: str = "", names: tuple[str, ...] = ()) -> dict[str, object]:
    """The child's answer: {"path": the isa path taken, "ir": {name: LLVM IR}} for the kernels
    named (default: all of _IR_SCRIPT's)."""
    env = dict(os.environ, NUMBA_OPT="0", NUMBA_CPU_NAME="ivybridge", NUMBA_CPU_FEATURES=features)
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba-cache")  # never mix with the host cache
    out = tmp_path / "ir.json"
    root = str(Path(__file__).resolve().parents[1])
    args = [root, str(out)] + ([",".join(names)] if names else [])
    subprocess.run([sys.executable, "-c", prelude + _IR_SCRIPT, *args], env=env, check=True, timeout=900, capture_output=True)
    got: dict[str, object] = json.loads(out.read_text())
    return got


def _instructions(asm: str) -> Counter[str]:
    return Counter(line.split()[0] for line in asm.splitlines() if line.startswith("\t") and not line.startswith("\t."))


def _check_aarch64_build(name: str, ir_text: str) -> Counter[str]:
    """`ir_text` builds into an AArch64 object defining `name`, its integer products NEON vector
    instructions; the object's instructions counted."""
    assert "@llvm.x86." not in ir_text, name  # nothing in the IR that only x86 has
    obj, asm = _aarch64_object(ir_text)
    assert obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == 183, name  # e_machine EM_AARCH64
    ops = _instructions(asm)
    # the integer products as NEON widening multiplies (8 x 16-bit or 4 x 32-bit lanes) or dot products
    vector_products = sum(ops[o] for o in ("smull", "smull2", "umull", "umull2", "smlal", "smlal2", "umlal", "umlal2", "mla", "sdot", "udot"))
    assert vector_products >= 16, (name, ops.most_common(20))
    assert re.search(rf"^\t\.globl\t\S*{name}", asm, re.M), name  # the function is defined in the object
    return ops


@pytest.fixture(scope="module")
def kernel_irs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[dict[str, object]]]]:
    """Both children's answers, their compiles started together (tests/side_runs.py)."""
    jobs = {"generic": partial(_kernels_ir, tmp_path_factory.mktemp("generic"), _GENERIC),
            # the sdot kernels and one without byte products on that path (each compile costs minutes)
            "dotprod": partial(_kernels_ir, tmp_path_factory.mktemp("dotprod"), _GENERIC + ",+dotprod", _DOTPROD_PRELUDE,
                               _SDOT_KERNELS + ("decode_rows_q4_k",))}
    wanted = {"generic": "test_kernels_build_for_aarch64", "dotprod": "test_dotprod_kernels_build_for_aarch64_with_sdot"}
    with together({k: job for k, job in jobs.items() if selected(request, wanted[k])}) as runs:
        yield runs


@pytest.mark.slow
def test_kernels_build_for_aarch64(kernel_irs: dict[str, Future[dict[str, object]]]) -> None:
    got = kernel_irs["generic"].result()
    assert got["path"] == "generic"
    assert isinstance(got["ir"], dict)
    for name, ir_text in got["ir"].items():
        _check_aarch64_build(name, ir_text)


# The kernels whose byte products take sdot on the dot-product path (isa.dot4 and isa.sdot):
# the packed 32-value types and K-quants (packed.py, packed_k.py) and the stored 32-value
# types' 16-row kernel (rows.py, `_legacy_terms_vnni`).
_SDOT_KERNELS = ("decode_packed_q5_0", "decode_packed_q8_0", "decode_packed_q4_k", "decode_packed_q6_k", "decode_rows_q4_0", "decode_rows_q8_0")


@pytest.mark.slow
def test_dotprod_kernels_build_for_aarch64_with_sdot(kernel_irs: dict[str, Future[dict[str, object]]]) -> None:
    """On aarch64 with the dot product extension (NUMBA_CPU_NAME=neoverse-n1, apple-m1, or
    +dotprod) the byte products are sdot instructions: fails if the path stops being chosen."""
    got = kernel_irs["dotprod"].result()
    assert got["path"] == "neon-dotprod"
    assert isinstance(got["ir"], dict)
    for name, ir_text in got["ir"].items():
        assert (_STAND_IN in ir_text) == (name in _SDOT_KERNELS), name
        ops = _check_aarch64_build(name, ir_text.replace(_STAND_IN, "llvm.aarch64.neon.sdot.v4i32.v16i8"))
        if name in _SDOT_KERNELS:
            assert ops["sdot"] >= 4, (name, ops.most_common(20))
