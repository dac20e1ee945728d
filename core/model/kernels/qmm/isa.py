"""The instruction sets the kernels are generated for, and the integer products each one has.

numba generates code for one target machine: the host's CPU, or the one NUMBA_CPU_NAME and
NUMBA_CPU_FEATURES name. The 16-row kernels (core/model/kernels/qmm/rows.py) pick their
instructions from that machine's features (`Target.of`), read at the start of each kernel's
code generation (numba generates one function at a time, under its compiler lock):

| path         | features                      | byte products (`madd_u8`, `dot4`)            |
|--------------|-------------------------------|----------------------------------------------|
| avx512-vnni  | AVX512-BW and AVX512-VNNI      | vpdpbusd and vpmaddubsw on 512-bit vectors   |
| avx-vnni     | AVX2 and AVX-VNNI (no AVX-512) | vpdpbusd (VEX) and vpmaddubsw on 256-bit     |
| avx512bw     | AVX512-BW, no VNNI             | vpmaddubsw on 512-bit                        |
| avx2         | AVX2                          | vpmaddubsw on 256-bit                        |
| neon-dotprod | aarch64 with the dot product  | sdot (Armv8.2 DotProd) on 128-bit            |
|              | (`+dotprod`: Neoverse N1, M1) |                                              |
| generic      | anything else (SSE, NEON)     | the products written out (LLVM's choice)     |

The functions here take LLVM vectors of any multiple of the chosen width and split them into
the instruction's own vectors (a <64 x i8> is two 256-bit halves on AVX2). Each computes exact
integers (the callers keep the operands where nothing saturates), so every path gives the same
integers, and the kernels the same bits (tests/test_qmm.py compiles them for each path).

The instructions are called by name where the target has them: LLVM rewrites the written-out
pattern of vpmaddubsw into 16-bit multiplies and shuffles once it proves the int16 clamp a
no-op (about five times the instructions).

`dot4` is the product both vpdpbusd and sdot compute: int32 lane i of the accumulator plus the 4
products of bytes 4i .. 4i + 3 (the same bytes to the same lane in both, so that a kernel's
int32 partial sums, and the floats made of them lane by lane, are those of every other path).
vpdpbusd reads one operand unsigned, sdot both signed: `dot4` takes codes 0..127 there, which
read the same either way; `sdot` (signed times signed, dotprod targets only) lets the kernels
skip the offsets and sign tricks that vpdpbusd and vpmaddubsw need for signed codes. (udot,
unsigned times unsigned, has no use here: activation codes are signed.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llvmlite import ir

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)


def features(context: Any) -> frozenset[str]:
    """The features (+name) of the target machine numba generates code for."""
    return frozenset(str(getattr(context.codegen(), "_tm_features", "")).split(","))


@dataclass(frozen=True)
class Target:
    """What the generated code may use: the vector width in bytes of vpmaddubsw (0: none), of
    vpdpbusd (0: none) and of sdot (0: none; 16 on aarch64 with the dot product extension)."""

    madd_bytes: int = 0
    dpbusd_bytes: int = 0
    sdot_bytes: int = 0

    @classmethod
    def of(cls, feats: frozenset[str]) -> Target:
        bw = "+avx512bw" in feats
        avx2 = "+avx2" in feats
        vnni512 = bw and "+avx512vnni" in feats
        vnni256 = avx2 and ("+avxvnni" in feats or ("+avx512vnni" in feats and "+avx512vl" in feats))
        sdot = 16 if "+dotprod" in feats else 0  # an aarch64 feature: no x86 target names it
        return cls(64 if bw else 32 if avx2 else 0, 64 if vnni512 else 32 if vnni256 else 0, sdot)

    @property
    def dot4(self) -> bool:
        """Whether `dot4` (vpdpbusd or sdot) is an instruction here."""
        return bool(self.dpbusd_bytes or self.sdot_bytes)

    @property
    def path(self) -> str:
        """The path's name (module docstring)."""
        if self.sdot_bytes:
            return "neon-dotprod"
        if self.dpbusd_bytes:
            return "avx512-vnni" if self.dpbusd_bytes == 64 else "avx-vnni"
        return {64: "avx512bw", 32: "avx2"}.get(self.madd_bytes, "generic")


SDOT = "llvm.aarch64.neon.sdot.v4i32.v16i8"  # the intrinsic `sdot` calls (tests/test_qmm_aarch64.py renames it)

TARGET = Target()  # the target of the code being generated (`set_target`)


def set_target(context: Any) -> Target:
    """Read the target machine of `context` into TARGET (at the start of a kernel's codegen)."""
    global TARGET
    TARGET = Target.of(features(context))
    return TARGET


def target_path(context: Any) -> str:
    """The path (module docstring) numba's code for `context` takes."""
    return Target.of(features(context)).path


def vec(t: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(t, n)


def const_vec(t: ir.Type, values: list[int]) -> ir.Constant:
    return ir.Constant(vec(t, len(values)), values)


def _intrinsic(builder: Any, name: str, ret: ir.Type, args: list[ir.Type]) -> Any:
    return builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(ret, args), name)


def _parts(builder: Any, v: Any, k: int) -> list[Any]:
    """v split into k equal vectors, in order."""
    n = v.type.count // k
    if k == 1:
        return [v]
    return [builder.shuffle_vector(v, v, const_vec(_I32, list(range(i * n, (i + 1) * n)))) for i in range(k)]


def concat(builder: Any, parts: list[Any]) -> Any:
    """Vectors of one type, concatenated in order (a power of two of them)."""
    while len(parts) > 1:
        n = parts[0].type.count
        parts = [builder.shuffle_vector(parts[i], parts[i + 1], const_vec(_I32, list(range(2 * n)))) for i in range(0, len(parts), 2)]
    return parts[0]


def _by_parts(builder: Any, name: str, width: int, ret: ir.Type, operands: list[Any]) -> Any:
    """The instruction `name` (operands of `width` bytes, result type `ret` per part) applied to
    each `width`-byte part of the operands, the results concatenated."""
    k = operands[0].type.count * operands[0].type.element.width // 8 // width
    fn = _intrinsic(builder, name, ret, [vec(o.type.element, o.type.count // k) for o in operands])
    split = [_parts(builder, o, k) for o in operands]
    return concat(builder, [builder.call(fn, [s[i] for s in split]) for i in range(k)])


def madd_u8(builder: Any, u: Any, s: Any) -> Any:
    """<n x i8> unsigned u . <n x i8> signed s -> <n/2 x i16>, products added in pairs
    (vpmaddubsw). The instruction saturates to int16: callers keep |pair| < 2^15 (codes < 64
    times int8: |pair| <= 2 * 63 * 128), where every form gives the exact pair sums."""
    n = u.type.count
    width = TARGET.madd_bytes
    if width and n % min(width, n) == 0 and n >= 16:
        w = min(width, n)  # a 32-byte operand on an AVX-512 target takes the 256-bit form
        name = {64: "llvm.x86.avx512.pmaddubs.w.512", 32: "llvm.x86.avx2.pmadd.ub.sw", 16: "llvm.x86.ssse3.pmadd.ub.sw.128"}[w]
        return _by_parts(builder, name, w, vec(_I16, w // 2), [u, s])
    even = const_vec(_I32, list(range(0, n, 2)))
    odd = const_vec(_I32, list(range(1, n, 2)))
    v32 = vec(_I32, n // 2)
    ue, uo = (builder.zext(builder.shuffle_vector(u, u, m), v32) for m in (even, odd))
    se, so = (builder.sext(builder.shuffle_vector(s, s, m), v32) for m in (even, odd))
    return builder.trunc(builder.add(builder.mul(ue, se), builder.mul(uo, so)), vec(_I16, n // 2))


def madd_i16(builder: Any, a: Any, b: Any) -> Any:
    """<n x i16> a . <n x i16> b -> <n/2 x i32>, products added in pairs (vpmaddwd; exact
    unless a pair is two products of -32768 * -32768, which no caller forms). Written out:
    LLVM selects vpmaddwd for it, and fuses it with an add into vpdpwssd where the target has
    VNNI."""
    n = a.type.count
    v32 = vec(_I32, n)
    prod = builder.mul(builder.sext(a, v32), builder.sext(b, v32))
    even = builder.shuffle_vector(prod, prod, const_vec(_I32, list(range(0, n, 2))))
    odd = builder.shuffle_vector(prod, prod, const_vec(_I32, list(range(1, n, 2))))
    return builder.add(even, odd)


def pmaddwd(builder: Any, a: Any, b: Any) -> Any:
    """madd_i16 as the instruction itself (vpmaddwd) where the target has it: LLVM turns the
    written-out form into widening 32-bit multiplies (vpmulld) when it sees one operand's values
    are small (a splatted scale), several times slower."""
    n = a.type.count
    width = TARGET.madd_bytes
    if width and n * 2 % min(width, n * 2) == 0 and n >= 8:
        w = min(width, n * 2)
        name = {64: "llvm.x86.avx512.pmaddw.d.512", 32: "llvm.x86.avx2.pmadd.wd", 16: "llvm.x86.sse2.pmadd.wd"}[w]
        return _by_parts(builder, name, w, vec(_I32, w // 4), [a, b])
    return madd_i16(builder, a, b)


def quad_sums(builder: Any, pairs: Any) -> Any:
    """<n x i16> pair sums -> <n/2 x i32>: adjacent pairs added (vpmaddwd with ones)."""
    return madd_i16(builder, pairs, const_vec(_I16, [1] * pairs.type.count))


def dpbusd(builder: Any, acc: Any, u: Any, s: Any) -> Any:
    """acc + (sums of 4 products of unsigned bytes of u and signed bytes of s), per int32 lane
    (vpdpbusd; u, s: <4n x i8>, acc: <n x i32>). Exact: no saturation, |each sum| < 2^17.
    Only for targets with it (TARGET.dpbusd_bytes)."""
    width = TARGET.dpbusd_bytes
    assert width, "vpdpbusd on a target without VNNI"
    n32 = u.type.count // 4
    w = min(width, u.type.count)
    name = "llvm.x86.avx512.vpdpbusd.512" if w == 64 else "llvm.x86.avx512.vpdpbusd.256"
    as32 = [acc, builder.bitcast(u, vec(_I32, n32)), builder.bitcast(s, vec(_I32, n32))]
    return _by_parts(builder, name, w, vec(_I32, w // 4), as32)


def sdot(builder: Any, acc: Any, a: Any, b: Any) -> Any:
    """acc + (sums of 4 products of signed bytes of a and signed bytes of b), per int32 lane
    (the Armv8.2 dot product, sdot; a, b: <4n x i8>, acc: <n x i32>), as vpdpbusd groups
    them: lane i takes bytes 4i .. 4i + 3. Exact: |each sum| <= 4 * 128 * 128. Only for
    targets with it (TARGET.sdot_bytes)."""
    assert TARGET.sdot_bytes, "sdot on a target without the dot product"
    return _by_parts(builder, SDOT, 16, vec(_I32, 4), [acc, a, b])


def dot4(builder: Any, acc: Any, u: Any, s: Any) -> Any:
    """acc + (sums of 4 products of the bytes of u and of s), per int32 lane, u's bytes codes
    0..127 (read alike unsigned or signed), s's signed: vpdpbusd or sdot, whichever the target
    has (TARGET.dot4)."""
    return sdot(builder, acc, u, s) if TARGET.sdot_bytes else dpbusd(builder, acc, u, s)


def sign_i8(builder: Any, x: Any, q: Any) -> Any:
    """x with the sign of q: x where q > 0, -x where q < 0, 0 where q == 0 (vpsignb, 256-bit,
    on AVX2 and AVX-512 targets; -(-128) wraps to -128, as the instruction does)."""
    n = x.type.count
    if TARGET.madd_bytes >= 32 and n % 32 == 0:
        return _by_parts(builder, "llvm.x86.avx2.psign.b", 32, vec(_I8, 32), [x, q])
    zero = ir.Constant(vec(_I8, n), [0] * n)
    neg = builder.select(builder.icmp_signed("<", q, zero), builder.sub(zero, x), x)
    return builder.select(builder.icmp_signed("==", q, zero), zero, neg)


def lookup16(builder: Any, table: list[int], idx: Any) -> Any:
    """<n x i8> idx (each 0..15) -> table[idx] (16 byte values): vpshufb with the table in every
    16-byte lane on AVX2 and AVX-512 targets (256-bit form), else one compare and select per entry."""
    n = idx.type.count
    if TARGET.madd_bytes >= 32 and n % 32 == 0:
        tab = const_vec(_I8, [v if v < 128 else v - 256 for v in table] * 2)
        fn = _intrinsic(builder, "llvm.x86.avx2.pshuf.b", vec(_I8, 32), [vec(_I8, 32), vec(_I8, 32)])
        return concat(builder, [builder.call(fn, [tab, part]) for part in _parts(builder, idx, n // 32)])
    out = ir.Constant(vec(_I8, n), [table[0] % 256] * n)
    for k in range(1, 16):
        hit = builder.icmp_unsigned("==", idx, const_vec(_I8, [k] * n))
        out = builder.select(hit, const_vec(_I8, [table[k] % 256] * n), out)
    return out
