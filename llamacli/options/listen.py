"""`llama serve`'s HTTP options: where it listens, whom it lets in (API keys, TLS, CORS), what one
request may ask for, and how it logs. They become one ListenOptions (options/serve_options.py
groups it with the others)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import typer

from llamacli.options.groups import SERVER, Opt, in_panel, in_range

OPTIONS: list[Opt] = in_panel(SERVER, [
    Opt("host", str, "127.0.0.1", ("--host",), "Address(es) to listen on, comma-separated; a path ending in .sock is a UNIX socket."),
    Opt("port", int, 8080, ("--port",), "Port to listen on (0: any free port, printed at startup).", check=in_range(0, 65535)),
    Opt("api_key", list[str], [], ("--api-key",),
        "API key (repeatable, or comma-separated); requests then need `Authorization: Bearer KEY`."),
    Opt("api_key_file", Optional[str], None, ("--api-key-file",), "File of API keys, one per line (# starts a comment)."),
    Opt("timeout", float, 3600, ("-to", "--timeout"), "Connection read timeout, seconds."),
    Opt("sse_ping_interval", float, 30.0, ("--sse-ping-interval",),
        "Seconds of stream silence before an SSE ping comment (-1: never)."),
    Opt("max_body_size", str, "10M", ("--max-body-size",),
        "Largest request body (bytes; K, M, G suffixes): a larger one is a 413 before it is read."),
    Opt("max_prompts", int, 128, ("--max-prompts",), "Most completions one request may ask for (prompts x n; 0: no limit)."),
    Opt("max_embd_inputs", int, 2048, ("--max-embd-inputs",), "Most inputs in one embeddings request (OpenAI's limit; 0: no limit)."),
    Opt("threads_http", int, -1, ("--threads-http",), "Threads for tokenizing and templating requests (-1: auto)."),
    Opt("ssl_key_file", Optional[str], None, ("--ssl-key-file",), "PEM private key (serve HTTPS)."),
    Opt("ssl_cert_file", Optional[str], None, ("--ssl-cert-file",), "PEM certificate (serve HTTPS)."),
    Opt("cors_origins", Optional[str], None, ("--cors-origins",),
        "Allowed CORS origins: *, localhost, or a comma-separated list (default: *, localhost with --tools)."),
    Opt("cors_methods", str, "GET, POST, DELETE, OPTIONS", ("--cors-methods",), "Access-Control-Allow-Methods of a preflight."),
    Opt("cors_headers", str, "*", ("--cors-headers",), "Access-Control-Allow-Headers of a preflight."),
    Opt("log_format", str, "text", ("--log-format",), "Request log lines: text or json."),
    Opt("verbose", bool, False, ("-v", "--verbose"),
        "Log /health requests too; responses carry __verbose (the prompt, the settings)."),
])


@dataclass(frozen=True)
class ListenOptions:
    host: str
    port: int
    api_keys: list[str]  # --api-key and the lines of --api-key-file
    timeout: float
    sse_ping_interval: float
    max_body_size: int  # bytes
    max_prompts: int
    max_embd_inputs: int
    threads_http: int
    ssl_key_file: str | None
    ssl_cert_file: str | None
    cors_origins: str | None  # None: the default, which depends on --tools
    cors_methods: str
    cors_headers: str
    log_format: str  # text or json
    verbose: bool


def build(values: dict[str, Any]) -> ListenOptions:
    """ListenOptions from the options' values; validated (the API key file is read now)."""
    v = dict(values)
    if v["log_format"] not in ("text", "json"):
        raise typer.BadParameter("--log-format must be text or json")
    if bool(v["ssl_key_file"]) != bool(v["ssl_cert_file"]):
        raise typer.BadParameter("--ssl-key-file and --ssl-cert-file go together")
    v["api_keys"] = read_api_keys(v.pop("api_key"), v.pop("api_key_file"))
    v["max_body_size"] = parse_size(v["max_body_size"], "--max-body-size")
    return ListenOptions(**v)


def read_api_keys(keys: list[str], key_file: Optional[str]) -> list[str]:
    """--api-key values (comma-separated) and the keys of --api-key-file (one a line, # comments)."""
    out = [k.strip() for arg in keys for k in arg.split(",") if k.strip()]
    if key_file:
        with open(key_file, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    out.append(line)
        if not out:
            raise typer.BadParameter(f"--api-key-file {key_file}: no keys in the file")
    return out


def parse_size(text: str, flag: str) -> int:
    """Bytes from "4096", "512K", "10M", "1G" (powers of 1024)."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if mult > 1 else t) * mult)
    except (ValueError, OverflowError):
        raise typer.BadParameter(f"{flag} must be a size such as 4096, 512K or 10M, got {text!r}") from None
    if n <= 0:
        raise typer.BadParameter(f"{flag} must be positive, got {text!r}")
    return n
