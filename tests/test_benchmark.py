"""llamacli/benchmark.py: the header of `llama bench`."""

from __future__ import annotations

from llamacli.benchmark import memory_line


def test_memory_line_says_what_is_mapped_and_what_is_resident() -> None:
    """GGUF-byte weights are the mapped file, used in place (not "weights 0 MiB"); float32
    copies, where a numerics mode makes them, come on top; resident is the process's."""
    line = memory_line(253_113_024, 190_000, 217 * 2**20)  # the norms' vectors are float32 copies
    assert line == "weights mapped from the file 241 MiB (used in place, not copied), process resident 217 MiB"
    line = memory_line(253_113_024, 1100 * 2**20, 1400 * 2**20)
    assert line == "weights mapped from the file 241 MiB + float32 copies 1100 MiB, process resident 1400 MiB"


def test_memory_line_names_the_file_backed_part_of_resident() -> None:
    """The MoE target (resident <= file-backed pages + 300 MB) needs both figures on the line."""
    line = memory_line(4_700_000_000, 0, 500 * 2**20, 320 * 2**20)
    assert line.endswith("process resident 500 MiB (320 MiB file-backed)")


def test_memory_line_says_what_is_packed() -> None:
    line = memory_line(253_113_024, 190_000, 260 * 2**20, packed_bytes=222 * 2**20)
    assert line == ("weights mapped from the file 241 MiB (222 MiB of it packed for the kernels, the rest used in place), "
                    "process resident 260 MiB")
    line = memory_line(4_964_094_752, 0, 109 * 2**20, 59 * 2**20, cached_bytes=384_276_480)
    assert line == ("weights mapped from the file 4734 MiB (366 MiB of it packed for the kernels in a mapped cache file, "
                    "the rest used in place), process resident 109 MiB (59 MiB file-backed)")
