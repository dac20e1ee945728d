"""The merge loop of SPM and BPE, compiled: llama.cpp's llm_tokenizer_spm_session and
llm_tokenizer_bpe_session on UTF-8 bytes, in time O(n log n) for any text.

Both start a word as one symbol per UTF-8 character (llama.cpp's lead-byte rule: a truncated
sequence at the end is one shorter symbol) and repeatedly merge the best adjacent pair:

* SPM: a pair whose concatenation is a token; the highest token score first, ties leftmost.
* BPE: a pair listed in the merges; the lowest rank first, ties leftmost.

A symbol is a span of the word's bytes; symbol i starts at byte i (merging keeps the left
index), so a linked list of lengths is the whole state. Candidate pairs go into a binary
heap keyed by one integer, (priority << 32) | left; an entry is stale once either of its
symbols has changed, which shows as a length sum different from the one it was pushed with
(symbols only grow to the right and only vanish into their left neighbour, so a pair whose
lengths still add up is still the same two neighbours: llama.cpp's own check). Each merge
pushes at most two entries, so a word of n characters costs O(n log n).

Token and merge lookups go through `KeyTable`, an open-addressing hash table over byte
strings: a key is a pair (a, b) of byte strings (tokens have an empty a; a merge "a b" is
split at its first space after position 0, as llama.cpp's bpe_ranks is). Its probe lengths
depend on the vocabulary only, never on the text.

The remaining symbols become their token ids; a symbol that is no token is spelled with one
token per byte (`fallback`): BPE drops a byte without a token, SPM reports it (-1 - byte).
`work[0]` counts heap pushes and pops, `work[1]` table lookups: both at most a small
multiple of the text's length, which the tests check on inputs that made the old loops
quadratic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numba.core import cgutils
from numba.extending import intrinsic

from llamacli.core.string_array import StringArray
from llamacli.core.text.tokenizer.unicode import encode_utf8, utf8_ends

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_PAIR_MARK = np.uint64(0x100)  # hashed between a and b: no byte has this value
_LEFT_BITS = np.uint64(32)
_LEFT_MASK = np.uint64(0xFFFFFFFF)
_TAG_SHIFT = np.uint64(33)

SPM, BPE = 0, 1  # merge rules
IGNORE_MERGES = 2  # BPE: a word that is a token as a whole stays one token
NEWLINE_WORDS = 4  # BPE (Gemma 4): so does a word made only of newlines


@njit(cache=True, nogil=True)
def _hash(buf: np.ndarray, a0: int, a1: int, b0: int, b1: int) -> np.uint64:
    """FNV-1a over buf[a0:a1], a mark, buf[b0:b1]."""
    h = _FNV_OFFSET
    for i in range(a0, a1):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    h = (h ^ _PAIR_MARK) * _FNV_PRIME
    for i in range(b0, b1):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    return h


@njit(cache=True, nogil=True)
def _slot_entry(h: np.uint64, k: int) -> np.int64:
    """A slot's value: 31 high bits of the key's hash (a tag that rejects most other keys
    without reading them) above the key's index."""
    return np.int64((h >> _TAG_SHIFT) << _LEFT_BITS) | np.int64(k)


@njit(cache=True, nogil=True)
def _build(data: np.ndarray, start: np.ndarray, alen: np.ndarray, n_slots: int) -> np.ndarray:
    """The slots (int64, -1 empty): key k is (data[s:s+alen], data[s+alen:e]) with
    s, e = start[k:k+2]; the first of equal keys wins (std::map::emplace)."""
    slots = np.full(n_slots, -1, np.int64)
    for k in range(start.shape[0] - 1):
        s, e = start[k], start[k + 1]
        m = s + alen[k]
        i = _probe(slots, start, alen, data, data, s, m, e)
        if slots[i] < 0:
            slots[i] = _slot_entry(_hash(data, s, m, m, e), k)
    return slots


@njit(cache=True, nogil=True)
def _probe(slots: np.ndarray, start: np.ndarray, alen: np.ndarray, data: np.ndarray, buf: np.ndarray,
           s: int, m: int, e: int) -> int:
    """The slot that holds key (buf[s:m], buf[m:e]), or the empty slot where it would go."""
    h = _hash(buf, s, m, m, e)
    tag = np.int64(h >> _TAG_SHIFT)
    mask = slots.shape[0] - 1
    i = np.int64(h & np.uint64(mask))
    n, a = e - s, m - s
    while True:
        v = slots[i]
        if v < 0 or (v >> 32) == tag and _same(data, start, alen, v & 0xFFFFFFFF, buf, s, n, a):
            return i
        i = (i + 1) & mask


@njit(cache=True, nogil=True)
def _same(data: np.ndarray, start: np.ndarray, alen: np.ndarray, k: int, buf: np.ndarray, s: int, n: int, a: int) -> bool:
    """Whether key k is buf[s:s+n] split after a bytes."""
    ks = start[k]
    if start[k + 1] - ks != n or (a != 0 and alen[k] != a):
        return False
    if a == 0 and alen.shape[0] and alen[k] != 0:
        return False
    for i in range(n):
        if data[ks + i] != buf[s + i]:
            return False
    return True


@njit(cache=True, nogil=True)
def _find(table: tuple, buf: np.ndarray, s: int, m: int, e: int) -> int:  # type: ignore[type-arg]
    """The index of key (buf[s:m], buf[m:e]), -1 when absent."""
    data, start, alen, slots, max_len = table
    if e - s > max_len:
        return -1
    v = slots[_probe(slots, start, alen, data, buf, s, m, e)]
    return -1 if v < 0 else np.int64(v & 0xFFFFFFFF)


@njit(cache=True, nogil=True)
def _priority(rule: int, units: np.ndarray, s: int, m: int, e: int, tokens: tuple, pairs: tuple,  # type: ignore[type-arg]
              spm_order: np.ndarray, work: np.ndarray) -> int:
    """The heap priority of merging units[s:m] with units[m:e] (lower first), -1 if none."""
    work[1] += 1
    if rule == SPM:
        tid = _find(tokens, units, s, s, e)
        return -1 if tid < 0 else np.int64(spm_order[tid])
    return _find(pairs, units, s, m, e)


@njit(cache=True, nogil=True)
def _push(hkey: np.ndarray, hsize: np.ndarray, count: int, key: np.uint64, size: int) -> None:
    i = count
    while i > 0:
        parent = (i - 1) >> 1
        if hkey[parent] <= key:
            break
        hkey[i] = hkey[parent]
        hsize[i] = hsize[parent]
        i = parent
    hkey[i] = key
    hsize[i] = size


@njit(cache=True, nogil=True)
def _pop_root(hkey: np.ndarray, hsize: np.ndarray, count: int) -> None:
    """Remove the root of a heap of `count` entries (the caller read it first)."""
    count -= 1
    key, size = hkey[count], hsize[count]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= count:
            break
        if child + 1 < count and hkey[child + 1] < hkey[child]:
            child += 1
        if key <= hkey[child]:
            break
        hkey[i] = hkey[child]
        hsize[i] = hsize[child]
        i = child
    hkey[i] = key
    hsize[i] = size


@njit(cache=True, nogil=True)
def _utf8_len(lead: int) -> int:
    """llama.cpp unicode_len_utf8."""
    hi = lead >> 4
    return 1 if hi < 12 else (2 if hi < 14 else (3 if hi == 14 else 4))


@njit(cache=True, nogil=True)
def _add_pair(units: np.ndarray, w0: int, a: int, b: int, rule: int, tokens: tuple, pairs: tuple,  # type: ignore[type-arg]
              spm_order: np.ndarray, ln: np.ndarray, hkey: np.ndarray, hsize: np.ndarray, count: int,
              work: np.ndarray) -> int:
    """Push the pair of symbols a, b (neighbours) when they can merge; the new heap size."""
    p = _priority(rule, units, w0 + a, w0 + b, w0 + b + ln[b], tokens, pairs, spm_order, work)
    if p < 0:
        return count
    _push(hkey, hsize, count, (np.uint64(p) << _LEFT_BITS) | np.uint64(a), ln[a] + ln[b])
    work[0] += 1
    return count + 1


@njit(cache=True, nogil=True)
def _merge_word(units: np.ndarray, w0: int, w1: int, rule: int, tokens: tuple, pairs: tuple,  # type: ignore[type-arg]
                spm_order: np.ndarray, ln: np.ndarray, nxt: np.ndarray, prv: np.ndarray,
                hkey: np.ndarray, hsize: np.ndarray, work: np.ndarray) -> None:
    """Merge the symbols of units[w0:w1]; afterwards symbol i spans units[w0+i : w0+i+ln[i]]
    for i = 0, nxt[0], ..."""
    n = w1 - w0
    i = 0
    last = -1
    while i < n:  # one symbol per UTF-8 character
        size = min(_utf8_len(units[w0 + i]), n - i)
        ln[i] = size
        prv[i] = last
        if last >= 0:
            nxt[last] = i
        last = i
        i += size
    nxt[last] = -1
    count = 0
    i = 0
    while nxt[i] >= 0:
        count = _add_pair(units, w0, i, nxt[i], rule, tokens, pairs, spm_order, ln, hkey, hsize, count, work)
        i = nxt[i]
    while count > 0:
        key, size = hkey[0], hsize[0]
        _pop_root(hkey, hsize, count)
        count -= 1
        work[0] += 1
        left = np.int64(key & _LEFT_MASK)
        right = nxt[left]
        if ln[left] == 0 or right < 0 or ln[right] == 0 or ln[left] + ln[right] != size:
            continue  # stale: one of the two symbols has changed since
        ln[left] = size
        ln[right] = 0
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prv[after] = left
        # the new neighbour pairs: (before, left) and (left, after)
        before = prv[left]
        if before >= 0:
            count = _add_pair(units, w0, before, left, rule, tokens, pairs, spm_order, ln, hkey, hsize, count, work)
        if after >= 0:
            count = _add_pair(units, w0, left, after, rule, tokens, pairs, spm_order, ln, hkey, hsize, count, work)


@njit(cache=True, nogil=True)
def _whole_word(units: np.ndarray, w0: int, w1: int, flags: int, tokens: tuple) -> int:  # type: ignore[type-arg]
    """The token of a BPE word kept whole (IGNORE_MERGES, NEWLINE_WORDS), else -1."""
    if flags & IGNORE_MERGES == 0:
        if flags & NEWLINE_WORDS == 0:
            return -1
        for i in range(w0, w1):
            if units[i] != 10:
                return -1
    return _find(tokens, units, w0, w0, w1)


def _borrow_typing(typingctx: Any, arr: Any) -> Any:
    """numba's `_borrow`: the same array without its owner reference (meminfo NULL).

    numba counts references with atomic operations at every call that passes an array,
    and its pruning pass cannot remove them around loops: a lookup that passes a dozen
    arrays cost 0.3 us in such increments alone. `_encode` borrows its arguments (owned by
    its caller for the whole call) and hands the helpers the borrowed views."""

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        view = context.make_array(sig.args[0])(context, builder, args[0])
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        return view._getvalue()

    return arr(arr), codegen


_borrow: Any = intrinsic(_borrow_typing)  # typed as compiled code calls it: _borrow(array)


@njit(cache=True, nogil=True)
def _borrow_table(t: tuple) -> tuple:  # type: ignore[type-arg]
    return (_borrow(t[0]), _borrow(t[1]), _borrow(t[2]), _borrow(t[3]), t[4])


@njit(cache=True, nogil=True)
def _encode(units: np.ndarray, ends: np.ndarray, flags: int, tokens: tuple, pairs: tuple,  # type: ignore[type-arg]
            spm_order: np.ndarray, fallback: np.ndarray, work: np.ndarray, ln: np.ndarray, nxt: np.ndarray,
            prv: np.ndarray, hkey: np.ndarray, hsize: np.ndarray, out: np.ndarray, out_ends: np.ndarray) -> None:
    """`encode_words` with its scratch and output arrays given."""
    units, ends, spm_order, fallback, work = _borrow(units), _borrow(ends), _borrow(spm_order), _borrow(fallback), _borrow(work)
    ln, nxt, prv, hkey, hsize = _borrow(ln), _borrow(nxt), _borrow(prv), _borrow(hkey), _borrow(hsize)
    out, out_ends = _borrow(out), _borrow(out_ends)
    tokens, pairs = _borrow_table(tokens), _borrow_table(pairs)
    n_out = 0
    begin = 0
    for w in range(ends.shape[0]):
        w0, w1 = begin, ends[w]
        begin = w1
        n_out = _encode_word(units, w0, w1, flags, tokens, pairs, spm_order, fallback, work, ln, nxt, prv, hkey,
                             hsize, out, n_out)
        out_ends[w] = n_out


@njit(cache=True, nogil=True)
def _encode_word(units: np.ndarray, w0: int, w1: int, flags: int, tokens: tuple, pairs: tuple,  # type: ignore[type-arg]
                 spm_order: np.ndarray, fallback: np.ndarray, work: np.ndarray, ln: np.ndarray, nxt: np.ndarray,
                 prv: np.ndarray, hkey: np.ndarray, hsize: np.ndarray, out: np.ndarray, n_out: int) -> int:
    """Append the ids of the word units[w0:w1] to out[:n_out]; the new count."""
    rule = flags & 1
    if w1 > w0:
        tid = _whole_word(units, w0, w1, flags, tokens) if rule == BPE else -1
        if tid >= 0:
            out[n_out] = tid
            return n_out + 1
        _merge_word(units, w0, w1, rule, tokens, pairs, spm_order, ln, nxt, prv, hkey, hsize, work)
        i = 0
        while i >= 0:
            s, e = w0 + i, w0 + i + ln[i]
            tid = _find(tokens, units, s, s, e)
            if tid >= 0:
                out[n_out] = tid
                n_out += 1
            else:
                for k in range(s, e):  # llama.cpp looks up each byte
                    b = fallback[units[k]]
                    if b >= 0:
                        out[n_out] = b
                        n_out += 1
                    elif rule == SPM:
                        out[n_out] = -1 - np.int32(units[k])
                        n_out += 1
            i = nxt[i]
    return n_out


def encode_words(units: np.ndarray, ends: np.ndarray, flags: int, tokens: KeyTable, pairs: KeyTable,
                 spm_order: np.ndarray, fallback: np.ndarray, work: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, out_ends): the token ids (int32) of the words units[ends[w-1]:ends[w]] (uint8
    UTF-8, int64 ends), each merged on its own, word w's ids ending at out_ends[w]. `flags`
    holds the rule (SPM, BPE) and the BPE word options; SPM reads `spm_order`
    (`spm_order(scores)`), BPE the merge ranks in `pairs`."""
    widest = int(np.diff(ends, prepend=0).max()) if len(ends) else 0
    # a merge pops one entry and pushes at most two: at most n - 1 + (n - 1) live entries
    ln, nxt, prv = (np.empty(widest, np.int32) for _ in range(3))
    hkey, hsize = np.empty(2 * widest, np.uint64), np.empty(2 * widest, np.int32)
    out = np.empty(len(units), np.int32)  # at most one id per byte
    out_ends = np.empty(len(ends), np.int64)
    _encode(units, ends, flags, tokens.arrays, pairs.arrays, spm_order, fallback, work, ln, nxt, prv, hkey, hsize,
            out, out_ends)
    return out[: out_ends[-1] if len(ends) else 0], out_ends


class FragmentCache:
    """The ids of fragments tokenized lately, so that only new ones go to the kernel: a chat's
    earlier messages come back at every turn, each between the same special tokens. Bounded
    in bytes (cleared when full); fragments longer than `max_len` are not kept. The lists it
    returns are shared with the cache: read them, do not change them."""

    def __init__(self, max_bytes: int = 8 << 20, max_len: int = 1 << 16) -> None:
        self._ids: dict[bytes, list[int]] = {}
        self._bytes = 0
        self._max_bytes = max_bytes
        self._max_len = max_len

    def encode(self, fragments: list[bytes], encode_new: Callable[[list[bytes]], list[list[int]]]) -> list[list[int]]:
        got = [self._ids.get(f) for f in fragments]
        new = list(dict.fromkeys(f for f, ids in zip(fragments, got) if ids is None))
        if not new:
            return got  # type: ignore[return-value]  # no None left
        fresh = dict(zip(new, encode_new(new)))
        for frag, ids in fresh.items():
            if len(frag) <= self._max_len:
                if self._bytes + len(frag) > self._max_bytes:
                    self._ids.clear()
                    self._bytes = 0
                self._ids[frag] = ids
                self._bytes += len(frag)
        return [ids if ids is not None else fresh[f] for f, ids in zip(fragments, got)]


def split_ids(ids: np.ndarray, ends: np.ndarray) -> list[list[int]]:
    """ids cut at `ends` (each part ends where the next starts) as lists."""
    flat = ids.tolist()
    out: list[list[int]] = []
    begin = 0
    for end in ends.tolist():
        out.append(flat[begin:end])
        begin = end
    return out


@njit(cache=True, nogil=True)
def _split_merges(data: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge strings "a b" -> keys (a, b) without the space: llama.cpp splits at the first
    space after position 0; a merge with none becomes the pair ("", ""), which no two
    symbols form (its key is left empty)."""
    n = start.shape[0] - 1
    out = np.empty(data.shape[0], np.uint8)
    out_start = np.empty(n + 1, np.int64)
    alen = np.zeros(n, np.int32)
    o = 0
    for k in range(n):
        out_start[k] = o
        s, e = start[k], start[k + 1]
        cut = -1
        for i in range(s + 1, e):
            if data[i] == 32:
                cut = i
                break
        if cut < 0:
            continue
        alen[k] = cut - s
        for i in range(s, e):
            if i != cut:
                out[o] = data[i]
                o += 1
    out_start[n] = o
    return out[:o], out_start, alen


@dataclass(frozen=True)
class KeyTable:
    """Byte-string keys (a, b) -> int values, as the kernels read it (`arrays`)."""

    arrays: tuple  # type: ignore[type-arg]  # (data, start, alen, slots, max_len); a key's value: its index

    @classmethod
    def of_tokens(cls, tokens: Sequence[str]) -> KeyTable:
        """Token text (UTF-8) -> its index."""
        data, start = _concat(tokens)
        return cls._make(data, start, np.zeros(len(tokens), np.int32))

    @classmethod
    def of_merges(cls, merges: Sequence[str]) -> KeyTable:
        """BPE merge "a b" -> its rank (the index of its first occurrence)."""
        return cls._make(*_split_merges(*_concat(merges)))

    @classmethod
    def _make(cls, data: np.ndarray, start: np.ndarray, alen: np.ndarray) -> KeyTable:
        n = len(alen)
        n_slots = 1 << max(4, (2 * n - 1).bit_length())  # load factor at most 1/2
        slots = _build(data, start, alen, n_slots)
        max_len = int(np.diff(start).max()) if n else 0
        if not alen.any():
            alen = alen[:0]  # no pairs (a token table): _same need not read it
        return cls((data, start, alen, slots, max_len))


def find_key(table: KeyTable, key: bytes) -> int:
    """The value of a one-part key (a token's UTF-8) from Python, -1 when absent."""
    buf = np.frombuffer(key, np.uint8)
    return int(_find(table.arrays, buf, 0, 0, len(buf)))


def _concat(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The keys' UTF-8, concatenated, and where each starts (n + 1 offsets)."""
    if isinstance(keys, StringArray):  # already so: the same arrays
        return keys.data, keys.start
    joined = "".join(keys)
    start = np.zeros(len(keys) + 1, np.int64)
    start[1:] = utf8_ends(joined, keys)
    return np.frombuffer(encode_utf8(joined), np.uint8), start


def warm() -> None:
    """Compile (or load from numba's disk cache) the three kernels, on tiny inputs. The
    encoders call it when they are built, so that a model's loading, not its first request,
    pays for a first compilation (about 8 CPU seconds, once per machine; it holds the GIL)."""
    tokens, pairs = KeyTable.of_tokens(["a", "b", "ab"]), KeyTable.of_merges(["a b"])
    units = np.frombuffer(b"ab", np.uint8)
    encode_words(units, np.array([2], np.int64), BPE, tokens, pairs, np.zeros(3, np.uint32),
                 np.full(256, -1, np.int32), np.zeros(2, np.int64))


def spm_order(scores: np.ndarray) -> np.ndarray:
    """Per token, a uint32 that orders like -score (so the highest score pops first):
    float32 bits mapped so that unsigned order is numeric order."""
    neg = (-scores.astype(np.float32)) + np.float32(0.0)  # -0.0 -> +0.0: equal scores tie
    bits = neg.view(np.uint32)
    return np.where(bits & 0x80000000, ~bits, bits | 0x80000000).astype(np.uint32)
