"""llama.cpp's options that `llama` accepts on every model command (chat, complete, serve).

Click reads an unknown `-ngl` as `-n gl` and `-hf` as `-h -f`, so every multi-letter short
option of llama.cpp's tools (and its long names) is declared here once. A command that
implements an option declares it itself; `llama_cpp_flags(command)` adds the others as hidden
options that, when given, print one note line (`note: --n-gpu-layers has no effect here (...);
ignored`), the same on every command. Options llama.cpp gives an optional value
(`-fa [on|off|auto]`) are flags here and a following on/off/auto word is accepted, so that
both `-fa` and `-fa on` parse.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import typer

from llamacli.cli import err

# The words llama.cpp accepts after a flag whose value is optional.
OPTIONAL_VALUES = frozenset({"on", "off", "auto", "enabled", "disabled", "true", "false", "1", "0"})

NO_GPU = "no GPU: the engine runs on the CPU"
DRAFT_THREADS = "the draft model runs on the kernels' threads (-t)"
NO_AFFINITY = "no CPU affinity control"


@dataclass(frozen=True)
class Flag:
    """One llama.cpp option: its names, whether it takes a value, and why it does nothing here
    (why=None: another `llama` command implements it, it just does not apply to this one)."""

    names: tuple[str, ...]
    takes_value: bool
    why: str | None


F = Flag
FLAGS: list[Flag] = [
    F(("-ngl", "--gpu-layers", "--n-gpu-layers"), True, NO_GPU),
    F(("-ngld", "--spec-draft-ngl", "--gpu-layers-draft", "--n-gpu-layers-draft"), True, NO_GPU),
    F(("-fa", "--flash-attn"), False, "attention is one NumPy kernel; there is no flash-attention switch"),
    F(("-sm", "--split-mode"), True, "no multi-GPU split"),
    F(("-ts", "--tensor-split"), True, "no multi-GPU split"),
    F(("-mg", "--main-gpu"), True, NO_GPU),
    F(("-dev", "--device"), True, "the only device is the CPU"),
    F(("-devd", "--spec-draft-device", "--device-draft"), True, "the only device is the CPU"),
    F(("-nkvo", "--no-kv-offload"), False, NO_GPU),
    F(("-kvo", "--kv-offload"), False, NO_GPU),
    F(("--no-host",), False, "no host buffers"),
    F(("-fit", "--fit"), False, "no device memory to fit"),
    F(("-fitc", "--fit-ctx"), True, "no device memory to fit"),
    F(("-fitt", "--fit-target"), True, "no device memory to fit"),
    F(("-cmoe", "--cpu-moe"), False, NO_GPU),
    F(("-cmoed", "--spec-draft-cpu-moe", "--cpu-moe-draft"), False, NO_GPU),
    F(("-ncmoe", "--n-cpu-moe"), True, NO_GPU),
    F(("-ncmoed", "--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "--n-cpu-moe-draft"), True, NO_GPU),
    F(("-ncffn", "--n-cpu-ffn"), True, NO_GPU),
    F(("-ot", "--override-tensor"), True, "no buffer types to choose"),
    F(("-otd", "--spec-draft-override-tensor", "--override-tensor-draft"), True, "no buffer types to choose"),
    F(("-tb", "--threads-batch"), True, "NumPy's BLAS picks its own threads"),
    F(("-tbd", "--spec-draft-threads-batch", "--threads-batch-draft"), True, DRAFT_THREADS),
    F(("-td", "--spec-draft-threads", "--threads-draft"), True, DRAFT_THREADS),
    F(("-C", "--cpu-mask"), True, NO_AFFINITY),
    F(("-Cr", "--cpu-range"), True, NO_AFFINITY),
    F(("-Cb", "--cpu-mask-batch"), True, NO_AFFINITY),
    F(("-Crb", "--cpu-range-batch"), True, NO_AFFINITY),
    F(("-Cd", "--spec-draft-cpu-mask", "--cpu-mask-draft"), True, NO_AFFINITY),
    F(("-Crd", "--spec-draft-cpu-range", "--cpu-range-draft"), True, NO_AFFINITY),
    F(("--cpu-strict",), True, NO_AFFINITY),
    F(("--prio",), True, "no thread priority control"),
    F(("--poll",), True, "the engine thread sleeps on a condition variable"),
    F(("--numa",), True, "no NUMA placement"),
    F(("--mlock",), False, "weights are dequantized into process memory"),
    F(("--no-mmap",), False, "the GGUF is memory-mapped only while loading"),
    F(("--mmap",), False, "the GGUF is memory-mapped only while loading"),
    F(("-lm", "--load-mode"), True, "one loading mode"),
    F(("-lzm", "--lazy-mode"), True, "one loading mode"),
    F(("--swa-full",), False, "the KV cache keeps full-size rows for every layer already"),
    F(("-ctk", "--cache-type-k"), True, "K is cached in float32 (ggml numerics round it to f16 first)"),
    F(("-ctv", "--cache-type-v"), True, "V is cached in float32 (ggml numerics round it to f16 first)"),
    F(("-ctkd", "--spec-draft-type-k", "--cache-type-k-draft"), True, "the draft model's K is cached as the target's"),
    F(("-ctvd", "--spec-draft-type-v", "--cache-type-v-draft"), True, "the draft model's V is cached as the target's"),
    F(("-cb", "--cont-batching"), False, "continuous batching is always on"),
    F(("-nocb", "--no-cont-batching"), False, "continuous batching is always on"),
    F(("--repack",), False, "matrices with a packed form are always packed (the same results)"),
    F(("-nr", "--no-repack"), False, "matrices with a packed form are always packed (the same results; a model "
      "with experts keeps them in a cache file: LLAMA_PACK_CACHE=off turns that off)"),
    F(("--check-tensors",), False, "tensors are validated while loading"),
    F(("-cram", "--cache-ram"), True, "no host-memory prompt cache beyond the slots"),
    F(("-cms", "--checkpoint-min-step"), True, "context checkpoints are taken near a prompt's end only"),
    F(("-dt", "--defrag-thold"), True, "the KV cache never fragments (one row per slot)"),
    F(("-hfd", "-hfrd", "--spec-draft-hf", "--hf-repo-draft"), True, "no draft download: pass the draft GGUF with -md FILE"),
    F(("-lcd", "--lookup-cache-dynamic"), True, "ngram-cache counts the context only, no lookup cache files"),
    F(("-lcs", "--lookup-cache-static"), True, "ngram-cache counts the context only, no lookup cache files"),
    F(("--spec-draft-p-split", "--draft-p-split"), True, "no draft trees"),
    F(("--spec-ngram-simple-min-hits",), True, "ngram-simple does not use it (in llama.cpp either)"),
    F(("--spec-draft-backend-sampling",), False, "drafts are sampled in NumPy"),
    F(("--no-spec-draft-backend-sampling",), False, "drafts are sampled in NumPy"),
    F(("-mm", "--mmproj"), True, None),
    F(("--mmproj-auto", "--no-mmproj"), False, None),
    F(("--mmproj-offload", "--no-mmproj-offload"), False, None),
    F(("-mmu", "--mmproj-url"), True, "no projector downloads by URL: download it and pass -mm FILE"),
    F(("-mmdev", "--mmproj-device"), True, NO_GPU),
    F(("-bs", "--backend-sampling"), False, "sampling always runs in NumPy"),
    F(("-rea", "--reasoning"), False, "reasoning is left to the chat template"),
    F(("--reasoning-format",), True, "thoughts are folded apart in `llama chat` (/thoughts) and left in the text by `llama complete`"),
    F(("--reasoning-budget",), True, "no chat template here: use `llama chat` or `llama serve` for a reasoning budget"),
    F(("--reasoning-budget-message",), True, "no chat template here: use `llama chat` or `llama serve` for a reasoning budget"),
    F(("--reasoning-effort",), True, "the template's default effort is used (`llama serve` takes the flag)"),
    F(("--reasoning-preserve",), False, "earlier turns' reasoning is not kept (`llama serve` takes the flag)"),
    F(("--no-reasoning-preserve",), False, "earlier turns' reasoning is not kept (`llama serve` takes the flag)"),
    F(("-cl", "--cache-list"), False, "`llama list` lists the cached models"),
    F(("-bf", "--binary-file"), True, "no binary task files"),
    F(("-sp", "--special"), False, "special tokens are always printed as text"),
    F(("--perf",), False, "timings are always reported"),
    F(("--no-perf",), False, "timings are always reported"),
    F(("--log-colors",), False, "plain log lines"),
    F(("--log-disable",), False, "log lines go to stderr; redirect it to silence them"),
    F(("--log-file",), True, "logs go to stderr; redirect it to a file"),
    F(("-lv", "--verbosity", "--log-verbosity"), True, "one log level"),
    F(("--log-prefix",), False, "plain log lines"),
    F(("--log-timestamps",), False, "plain log lines"),
    F(("--reuse-port",), False, "one process serves the port"),
    F(("--sleep-idle-seconds",), True, "the model stays loaded"),
    # implemented by some commands, accepted (with a note) by the others
    F(("-md", "--spec-draft-model", "--model-draft"), True, None),
    F(("-ag", "--agent"), False, None),
    F(("-no-ag", "--no-agent"), False, None),
    F(("-np", "--parallel"), True, None),
    F(("-sys", "--system-prompt"), True, None),
    F(("-sysf", "--system-prompt-file"), True, None),
    F(("-mli", "--multiline-input"), False, None),
    F(("-st", "--single-turn"), False, None),
    F(("-co", "--color"), False, None),
    F(("-jf", "--json-schema-file"), True, None),
    F(("-sps", "--slot-prompt-similarity"), True, None),
    F(("-to", "--timeout"), True, None),
    F(("-ub", "--ubatch-size"), True, None),
    F(("-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"), True, None),
    F(("-kvu", "--kv-unified"), False, None),
    F(("-no-kvu", "--no-kv-unified"), False, None),
]

# Getting a model from elsewhere than Hugging Face (-hf, llamacli/hub.py): not implemented;
# asking for it is an error, not a note.
UNSUPPORTED: list[Flag] = [
    F(("-dr", "--docker-repo"), True, "downloading from Docker Hub"),
    F(("-mu", "--model-url"), True, "downloading a model from a URL"),
]

# Every multi-letter short option of llama-server and llama-cli (their READMEs in
# shared/reference); each must parse as itself on every model command.
LLAMA_CPP_SHORTS = sorted(
    {n for f in FLAGS + UNSUPPORTED for n in f.names if n.startswith("-") and not n.startswith("--") and len(n) > 2}
    | {"-hf", "-hfr", "-hff", "-hft", "-jf", "-kvu", "-no-kvu", "-mli", "-np", "-sps", "-st", "-sys", "-sysf", "-to", "-ub"}
)


def note(msg: str) -> None:
    err.print(f"note: {msg}", markup=False, highlight=False, soft_wrap=True)


def declared_names(params: list[inspect.Parameter]) -> set[str]:
    """Option names a command declares itself (typer.Option param_decls, '/'-split)."""
    names: set[str] = set()
    for p in params:
        for decl in getattr(p.default, "param_decls", ()) or ():
            names.update(n.strip() for n in str(decl).split("/") if n.strip())
    return names


def _alias(params: list[inspect.Parameter], flag: Flag, missing: list[str]) -> None:
    for p in params:
        decls = getattr(p.default, "param_decls", None)
        if decls and declared_names([p]) & set(flag.names):
            p.default.param_decls = (*decls, *missing)
            return


def llama_cpp_flags(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: add FLAGS that `command` does not declare as hidden options (one note each
    when given) and UNSUPPORTED ones (an error when given). The command must take
    `ctx: typer.Context` and allow extra args: stray on/off/auto words after optional-value
    flags are dropped there, anything else is an error."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        params = list(sig.parameters.values())
        hints = {p.name: p.annotation for p in params}
        have = declared_names(params)
        added: list[tuple[str, Flag, bool]] = []
        for i, flag in enumerate(FLAGS + UNSUPPORTED):
            names = [n for n in flag.names if n not in have]
            if len(names) < len(flag.names):
                _alias(params, flag, names)  # the command implements it: give it llama.cpp's other names
                continue
            ann = Optional[str] if flag.takes_value else Optional[bool]
            pname = f"llama_cpp_flag_{i}"
            params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY,
                                            default=typer.Option(None, *names, hidden=True), annotation=ann))
            hints[pname] = ann
            added.append((pname, flag, i >= len(FLAGS)))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for pname, flag, unsupported in added:
                if kwargs.pop(pname, None) is None:
                    continue
                if unsupported:
                    raise typer.BadParameter(
                        f"{flag.names[-1]}: {flag.why} is not supported; download the GGUF file and pass -m FILE.gguf, or use -hf USER/REPO[:QUANT]"
                    )
                why = flag.why or f"not used by `llama {command}`"
                note(f"{flag.names[-1]} has no effect here ({why}); ignored")
            ctx = kwargs.get("ctx")
            stray = [a for a in getattr(ctx, "args", []) if a.lower() not in OPTIONAL_VALUES]
            if stray:
                raise typer.BadParameter(f"unexpected argument(s): {' '.join(stray)}")
            return fn(*args, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = hints
        return wrapper

    return deco
