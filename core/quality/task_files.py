"""The task files of llama-perplexity's benchmarks, read as it reads them, and its choice of
tasks when asked for fewer than a file holds (tools/perplexity/perplexity.cpp).

- HellaSwag: 6 lines per task: context, the index of the gold ending, 4 endings.
- Winogrande: CSV lines `index,sentence,choice1,choice2,answer`, the sentence with one `_` where
  a choice goes (quoted when it has commas); lines that do not parse are skipped with a message.
- multiple choice (ARC, MMLU, TruthfulQA, ... as llama.cpp's converted files): binary,
  little-endian: uint32 n_task, uint32 offset of each task, then per task the question and two
  answer sets (mc1: one correct answer; mc2: several, unused), strings as uint32 length + bytes,
  a set as uint32 n, n strings, n int32 labels (1 = correct).

Random selections use std::mt19937 seeded with 1 (numpy's legacy MT19937 seeding is the same)
and libstdc++'s arithmetic: HellaSwag draws with uniform_int_distribution (Lemire's method over
32-bit draws), Winogrande and multiple choice with `int(scale * rng() * n)` in float32.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from llamacli.core.errors import InvalidRequest

T = TypeVar("T")
F32 = np.float32
MAX_ANSWERS = 100  # llama.cpp refuses a task with more answers


class TaskFileError(InvalidRequest):
    """A task file that cannot be read."""


class Mt19937:
    """std::mt19937 seeded with an integer (init_genrand), its raw 32-bit draws."""

    def __init__(self, seed: int = 1) -> None:
        self._bits = np.random.RandomState(seed)._bit_generator  # init_genrand(seed), as std::mt19937(seed)

    def __call__(self) -> int:
        return int(self._bits.random_raw())

    def uniform(self, n: int) -> int:
        """std::uniform_int_distribution<size_t>(0, n - 1)(rng) of libstdc++: Lemire's
        nearly-divisionless method on 32-bit draws."""
        product = self() * n
        low = product & 0xFFFFFFFF
        if low < n:
            threshold = (-n) % (1 << 32) % n
            while low < threshold:
                product = self() * n
                low = product & 0xFFFFFFFF
        return product >> 32

    def scaled(self, n: int) -> int:
        """int(scale * rng() * n) with scale = 1/(1 + max) in float32 (Winogrande, multiple choice)."""
        scale = F32(1) / (F32(1) + F32(0xFFFFFFFF))
        return int(F32(F32(scale * F32(self())) * F32(n)))


def pick_scaled(items: list[T], n: int) -> list[int]:
    """Indices of n items drawn without replacement as llama.cpp draws them (aux[j] taken,
    the last moved into its place)."""
    rng = Mt19937(1)
    aux = list(range(len(items)))
    out = []
    for _ in range(n):
        j = rng.scaled(len(aux))
        out.append(aux[j])
        aux[j] = aux[-1]
        aux.pop()
    return out


# ---- HellaSwag ----------------------------------------------------------------------------

@dataclass
class HellaswagTask:
    context: str
    gold: int
    endings: list[str]


def _lines(text: bytes) -> list[str]:
    """std::getline over the text: a last line without a newline counts, an empty end does not."""
    parts = text.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


def read_hellaswag(text: bytes, n_tasks: int) -> list[HellaswagTask]:
    """min(n_tasks, all) tasks, always in llama.cpp's random order."""
    lines = _lines(text)
    if len(lines) % 6:
        raise TaskFileError("number of lines in prompt not a multiple of 6")
    count = min(n_tasks, len(lines) // 6)
    rng = Mt19937(1)
    out = []
    for _ in range(count):
        idx = rng.uniform(len(lines) // 6)
        block = lines[idx * 6 : idx * 6 + 6]
        try:
            gold = int(block[1].strip())
        except ValueError:
            raise TaskFileError(f"HellaSwag task: the gold ending index {block[1]!r} is not a number") from None
        if not 0 <= gold < 4:
            raise TaskFileError(f"HellaSwag task: gold ending index {gold} is not 0 to 3")
        out.append(HellaswagTask(block[0], gold, block[2:6]))
        del lines[idx * 6 : idx * 6 + 6]
    return out


# ---- Winogrande ---------------------------------------------------------------------------

@dataclass
class WinograndeTask:
    first: str  # the sentence before `_`
    second: str  # after it
    choices: tuple[str, str]
    answer: int  # 1 or 2


def read_winogrande(text: bytes, n_tasks: int, warn: list[str]) -> list[WinograndeTask]:
    """The tasks that parse (problems appended to `warn`); n_tasks > 0 picks that many at
    random. As llama.cpp (std::getline until eof) the file's last line is never read when the
    text does not end with a newline, which -f ensures by dropping it."""
    out = []
    lines = text.split(b"\n")
    for raw in lines[:-1]:  # the piece after the last newline is where getline meets eof
        line = raw.decode("utf-8", "replace")
        task = _winogrande_line(line, warn)
        if task is not None:
            out.append(task)
    if 0 < n_tasks < len(out):
        out = [out[i] for i in pick_scaled(out, n_tasks)]
    return out


def _winogrande_line(line: str, warn: list[str]) -> WinograndeTask | None:
    commas = []
    quoted = False
    for i, ch in enumerate(line):
        if not quoted and ch == ",":
            commas.append(i)
            if len(commas) == 4:
                break
        elif ch == '"':
            quoted = not quoted
    if len(commas) != 4:
        warn.append(f"failed to find comma separators in <{line}>")
        return None
    c0, c1, c2, c3 = commas
    sentence = line[c0 + 2 : c1 - 1] if line[c0 + 1 : c0 + 2] == '"' else line[c0 + 1 : c1]
    where = sentence.find("_")
    if where < 0:
        warn.append(f"no _ in <{sentence}>")
        return None
    answer = line[c3 + 1 :].strip()
    if not answer[:1].isdigit() or int(_leading_int(answer)) not in (1, 2):
        warn.append(f"failed to parse answer <{line[c3 + 1:]}>")
        return None
    return WinograndeTask(sentence[:where], sentence[where + 1 :], (line[c1 + 1 : c2], line[c2 + 1 : c3]),
                          int(_leading_int(answer)))


def _leading_int(s: str) -> str:
    """What `stream >> int` reads: the leading digits."""
    n = 0
    while n < len(s) and s[n].isdigit():
        n += 1
    return s[:n]


# ---- multiple choice ----------------------------------------------------------------------

@dataclass
class ChoiceQuestion:
    question: str
    answers: list[str]
    labels: list[int]  # 1: correct (mc1: exactly one)


class _Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def u32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise ValueError
        (v,) = struct.unpack_from("<I", self.data, self.pos)
        self.pos += 4
        return int(v)

    def string(self) -> str:
        n = self.u32()
        if self.pos + n > len(self.data):
            raise ValueError
        s = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s

    def answers(self) -> tuple[list[str], list[int]]:
        n = self.u32()
        if n > MAX_ANSWERS:
            raise ValueError
        texts = [self.string() for _ in range(n)]
        labels = [struct.unpack_from("<i", self.data, self.pos + 4 * i)[0] for i in range(n)]
        if self.pos + 4 * n > len(self.data):
            raise ValueError
        self.pos += 4 * n
        return texts, labels

    def question(self) -> ChoiceQuestion:
        q = self.string()
        answers, labels = self.answers()
        self.answers()  # mc2: not used
        return ChoiceQuestion(q, answers, labels)


def read_multiple_choice(data: bytes, n_tasks: int) -> tuple[list[ChoiceQuestion], int]:
    """All questions in order, or n_tasks (> 0, fewer than the file has) picked at random; and
    how many the file has."""
    r = _Reader(data)
    try:
        n = r.u32()
    except ValueError:
        n = 0
    if n == 0:
        raise TaskFileError("no tasks")
    try:
        offsets = [r.u32() for _ in range(n)]
    except ValueError:
        raise TaskFileError("failed to read task positions from prompt") from None
    order = range(n) if n_tasks == 0 or n_tasks >= n else pick_scaled(list(range(n)), n_tasks)
    out = []
    for k, idx in enumerate(order):
        try:
            out.append((r if n_tasks == 0 or n_tasks >= n else _Reader(data, offsets[idx])).question())
        except (ValueError, struct.error):
            raise TaskFileError(f"failed to read task {k + 1} of {n}") from None
    return out, n
