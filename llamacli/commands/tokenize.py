"""`llama tokenize`: text -> token ids with the model's vocabulary (llama.cpp's llama-tokenize).

Options and output follow tools/tokenize/tokenize.cpp: the text comes from `--stdin`, else
`-f FILE` (read byte-exact: no newline stripped, no UTF-8 decoding), else `-p TEXT`; escapes
(`\\n`, `\\t`, `\\xNN`, ...) are processed in all three unless `--no-escape`; BOS (and EOS when
the model asks for it) is added unless `--no-bos`; special-token text such as
`<start_of_turn>` becomes its id unless `--no-parse-special`. Default output: one
`%6d -> 'piece'` line per token; `--ids`: `[1, 2, 3]`; `--show-count` appends
`Total number of tokens: N`.

Our additions: text is also read from stdin when it is piped and neither -p nor -f is given;
`--pieces` prints `ID<TAB>PIECE` lines with the piece escaped so that every line is one
token (`\\n`, `\\t`, `\\r`, `\\\\`, other control bytes and invalid UTF-8 as `\\xNN`: the same
escapes -p reads back); `--json` prints exactly one JSON array of ints; `--count` prints only
the number of tokens.

Only the vocabulary (GGUF metadata) is read, never the weights. stdout carries the result
alone; errors are one line on stderr.
"""

from __future__ import annotations

import json
import sys

import typer

from llamacli.cli import app, guarded
from llamacli.core.errors import InvalidRequest
from llamacli.options.model_source import ModelSource, model_options

_SIMPLE_ESCAPES = {ord("n"): 0x0A, ord("r"): 0x0D, ord("t"): 0x09, ord("'"): 0x27, ord('"'): 0x22, ord("\\"): 0x5C}
_HEX = b"0123456789abcdefABCDEF"
_SPACES = b" \t\n\v\f\r"


def process_escapes(data: bytes) -> bytes:
    """llama.cpp's string_process_escapes on bytes: `\\n \\r \\t \\' \\" \\\\` and `\\xNN`
    (two characters read by strtol base 16); any other backslash pair is kept as is."""
    if b"\\" not in data:
        return data
    out = bytearray()
    i, n = 0, len(data)
    while i < n:
        c = data[i]
        if c != 0x5C or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        i += 1
        e = data[i]
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
        elif e == ord("x") and i + 2 < n and (val := _strtol2(data[i + 1 : i + 3])) is not None:
            out.append(val & 0xFF)
            i += 2
        else:
            out += bytes((0x5C, e))
        i += 1
    return bytes(out)


def _strtol2(x: bytes) -> int | None:
    """The value when strtol(x, &end, 16) consumes exactly both characters, else None."""
    if x[0] in _HEX and x[1] in _HEX:
        return int(x, 16)
    if x[1] in _HEX and (x[0] in _SPACES or x[0] in b"+-"):
        v = int(x[1:], 16)
        return -v if x[:1] == b"-" else v
    return None


def escape_piece(piece: bytes) -> str:
    """A piece on one line: control bytes, backslash and invalid UTF-8 escaped."""
    out: list[str] = []
    i, n = 0, len(piece)
    while i < n:
        b = piece[i]
        if b < 0x80:
            if b == 0x5C:
                out.append("\\\\")
            elif b == 0x0A:
                out.append("\\n")
            elif b == 0x09:
                out.append("\\t")
            elif b == 0x0D:
                out.append("\\r")
            elif b < 0x20 or b == 0x7F:
                out.append(f"\\x{b:02x}")
            else:
                out.append(chr(b))
            i += 1
            continue
        for size in (4, 3, 2):
            try:
                out.append(piece[i : i + size].decode("utf-8"))
            except UnicodeDecodeError:
                continue
            i += size
            break
        else:
            out.append(f"\\x{b:02x}")
            i += 1
    return "".join(out)


def _read_text(prompt: str | None, file: str | None, use_stdin: bool) -> bytes | None:
    """The text as bytes, or None when it must be read from stdin (after the model loads)."""
    if use_stdin:
        return None
    if file is not None:
        try:
            with open(file, "rb") as f:
                return f.read()
        except OSError as e:
            raise InvalidRequest(f"could not open file '{file}' for reading: {e.strerror or e}") from None
    if prompt is not None:
        return prompt.encode("utf-8", "surrogateescape")
    stdin = sys.stdin
    if stdin is not None and not stdin.isatty():
        data = stdin.buffer.read()
        if data:
            return data
    raise InvalidRequest("no text: pass -p TEXT, -f FILE or --stdin (or pipe text on stdin)")


@app.command()
@guarded
@model_options
def tokenize(
    source: ModelSource,  # -m, -hf, -hff, -hft, --offline (@model_options)
    prompt: str | None = typer.Option(None, "-p", "--prompt", help="Text to tokenize."),
    file: str | None = typer.Option(
        None, "-f", "--file", help="Read the text from a file, byte-exact (no trailing newline removed)."
    ),
    use_stdin: bool = typer.Option(
        False, "--stdin", help="Read the text from stdin (takes precedence over -f and -p; piped stdin is also read when neither is given)."
    ),
    ids: bool = typer.Option(False, "--ids", help="Print only the ids, as a Python-parseable list like [1, 2, 3]."),
    pieces: bool = typer.Option(False, "--pieces", help="Print ID<TAB>PIECE per token, the piece escaped to one line."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON array of ids."),
    count: bool = typer.Option(False, "--count", help="Print only the number of tokens."),
    show_count: bool = typer.Option(
        False, "--show-count", help="After the tokens, print 'Total number of tokens: N' (stderr with --json)."
    ),
    no_bos: bool = typer.Option(False, "--no-bos", help="Do not add BOS, even if the model normally uses one."),
    no_parse_special: bool = typer.Option(
        False, "--no-parse-special", help="Do not parse special-token text (chat, tool, etc.): tokenize it as plain text."
    ),
    escape: bool = typer.Option(
        True, "--escape/--no-escape", "-e", help="Process escapes (\\n, \\r, \\t, \\', \\\", \\\\, \\xNN) in the text, as llama.cpp does."
    ),
    log_disable: bool = typer.Option(False, "--log-disable", help="Accepted for llama-tokenize compatibility (we log nothing)."),
) -> None:
    """Tokenize text with a model's vocabulary (llama.cpp's llama-tokenize; loads no weights)."""
    if sum((ids, pieces, as_json, count)) > 1:
        raise InvalidRequest("choose one output format: --ids, --pieces, --json or --count")
    text = _read_text(prompt, file, use_stdin)

    from llamacli.core.model.weights.gguf_file import read_metadata
    from llamacli.core.text.tokenizer import load_tokenizer
    from llamacli.options.model_path import resolve_model

    model = source.path()
    tok = load_tokenizer(read_metadata(resolve_model(model)))
    if text is None:
        text = sys.stdin.buffer.read() if sys.stdin is not None else b""
    if escape:
        text = process_escapes(text)
    add_special = tok.vocab.add_bos and not no_bos
    toks = tok.tokenize(text, add_special=add_special, parse_special=not no_parse_special)

    out = bytearray()
    if as_json:
        out += json.dumps(toks).encode() + b"\n"
    elif ids:
        out += b"[" + ", ".join(map(str, toks)).encode() + b"]\n"
    elif count:
        out += b"%d\n" % len(toks)
    elif pieces:
        for t in toks:
            out += f"{t}\t{escape_piece(tok.token_to_piece(t, special=True))}\n".encode()
    else:
        for t in toks:
            out += b"%6d -> '" % t + tok.token_to_piece(t, special=True) + b"'\n"
    total = b"Total number of tokens: %d\n" % len(toks)
    if show_count and not as_json:
        out += total
    stdout = sys.stdout.buffer
    stdout.write(bytes(out))
    stdout.flush()
    if show_count and as_json:
        sys.stderr.write(total.decode())
