"""`llama chat`: an interactive chat REPL (prompt-toolkit + rich), or a pipe filter when stdin
is not a terminal. The logic lives in llamacli/chat/; this module parses options."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

import typer

from llamacli.cli import app, err, guarded
from llamacli.core.errors import InvalidRequest
from llamacli.core.sampling import SamplingParams
from llamacli.options import model_load, reasoning
from llamacli.options.llama_flags import llama_cpp_flags
from llamacli.options.model_source import ModelSource, model_options
from llamacli.options.common import (
    CTX_SIZE, PARALLEL, BatchSizeOpt, LoraOpt, LoraScaledOpt, NPredictOpt, NumericsOpt, ThreadsOpt, lora_specs,
    read_text_file, want_color,
)
from llamacli.options.groups import SAMPLING as S, SCRIPTING as P, TOOLS, find, typer_option
from llamacli.options.sampling import sampling_options
from llamacli.options.mmproj import MmprojOptions, fetch_model, may_have_projector, mmproj_options, no_projector
from llamacli.options.speculative import SpecOptions, speculative_options
from llamacli.options.tools import ToolOptions, tool_options

if TYPE_CHECKING:
    from llamacli.chat.agent import Agent


@app.command(context_settings={"allow_extra_args": True})
@guarded
@llama_cpp_flags("chat")
@sampling_options
@speculative_options
@tool_options
@mmproj_options
@model_options
def chat(
    ctx: typer.Context,
    source: ModelSource,  # -m, -hf, -hff, -hft, --offline (@model_options)
    ctx_size: int = typer_option(CTX_SIZE.but(help="Context size of the conversation (0: the model's training context).")),
    n_predict: int = NPredictOpt,
    batch_size: int = BatchSizeOpt,
    system_prompt: Optional[str] = typer.Option(None, "-sys", "--system-prompt", help="System prompt."),
    system_prompt_file: Optional[str] = typer.Option(None, "-sysf", "--system-prompt-file", help="Read the system prompt from a file."),
    prompt: Optional[str] = typer.Option(None, "-p", "--prompt", help="First message (with piped stdin: put before the piped text)."),
    image: list[str] = typer.Option([], "--image", metavar="FILE", help="Image for the first message (repeatable; needs -mm). /image FILE attaches one later."),
    audio: list[str] = typer.Option([], "--audio", metavar="FILE", help="Audio file (WAV, MP3, FLAC) for the first message, after the images (repeatable; needs -mm). /audio FILE attaches one later."),
    file: Optional[str] = typer.Option(None, "-f", "--file", help="Read the first message from a file."),
    chat_template: Optional[str] = typer_option(find(model_load.OPTIONS, "chat_template")),
    chat_template_file: Optional[str] = typer_option(find(model_load.OPTIONS, "chat_template_file")),
    jinja: bool = typer_option(find(model_load.OPTIONS, "jinja")),
    sampling: SamplingParams = None,  # type: ignore[assignment]  # set by @sampling_options
    speculative: SpecOptions = None,  # type: ignore[assignment]  # set by @speculative_options
    mmproj: MmprojOptions = None,  # type: ignore[assignment]  # set by @mmproj_options
    tools: ToolOptions = None,  # type: ignore[assignment]  # set by @tool_options
    reverse_prompt: Optional[list[str]] = typer.Option(None, "-r", "--reverse-prompt", help="Stop the answer at this text (repeatable).", rich_help_panel=S),
    color: Optional[bool] = typer.Option(None, "-co", "--color/--no-color", help="Colours and Markdown rendering (default: on for a terminal, off with NO_COLOR or TERM=dumb)."),
    multiline_input: bool = typer.Option(False, "-mli", "--multiline-input", help="Start in multiline mode: Enter inserts a newline, Alt+Enter sends."),
    single_turn: bool = typer.Option(False, "-st", "--single-turn", help="Answer the first message (-p/-f) and exit."),
    history_file: Optional[str] = typer.Option(None, "--history-file", help="Input history file (default: chat_history in $XDG_STATE_HOME/llamacli)."),
    no_history: bool = typer.Option(False, "--no-history", help="Keep input history in memory only."),
    show_timings: bool = typer.Option(True, "--show-timings/--no-show-timings", help="Stats line after each answer (on stderr in pipe mode)."),
    simple_io: bool = typer.Option(False, "--simple-io", help="Plain line input and plain output (no prompt-toolkit, no rich); stdin lines may be slash commands."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: content, finish_reason, usage, timings.", rich_help_panel=P),
    as_jsonl: bool = typer.Option(False, "--jsonl", help="One prompt per input line, answered concurrently; one JSON line each, in input order.", rich_help_panel=P),
    batch_lines: bool = typer.Option(False, "--batch-lines", help="One prompt per input line, answered concurrently; one answer per line (\\n escaped).", rich_help_panel=P),
    parallel: int = typer_option(PARALLEL.but(help="Most prompts run at once with --jsonl/--batch-lines (-1: all lines, at most 8).", panel=P)),
    grammar: Optional[str] = typer.Option(None, "--grammar", help="GBNF grammar every answer must follow.", rich_help_panel=S),
    grammar_file: Optional[str] = typer.Option(None, "--grammar-file", help="File to read the GBNF grammar from.", rich_help_panel=S),
    json_schema: Optional[str] = typer.Option(None, "-j", "--json-schema", help="JSON schema (or @file.json) every answer must follow.", rich_help_panel=S),
    json_schema_file: Optional[str] = typer.Option(None, "-jf", "--json-schema-file", help="File with a JSON schema every answer must follow.", rich_help_panel=S),
    lora: list[str] = LoraOpt,
    lora_scaled: list[str] = LoraScaledOpt,
    reasoning_budget: int = typer_option(find(reasoning.OPTIONS, "reasoning_budget")),
    reasoning_budget_message: str = typer_option(find(reasoning.OPTIONS, "reasoning_budget_message")),
    numerics: str = NumericsOpt,
    threads: int = ThreadsOpt,
    tool_choice: str = typer.Option("auto", "--tool-choice", help="tool_choice of each turn's first step with --tools: auto, required, none, or a tool's name (a small model then calls it for sure; later steps are auto).", rich_help_panel=TOOLS),
    confirm_tools: bool = typer.Option(True, "--confirm-tools/--no-confirm-tools", help="Ask before a write tool (exec_shell_command, write_file, edit_file, MCP tools not read-only) runs; piped input cannot answer, so there they are refused unless --no-confirm-tools.", rich_help_panel=TOOLS),
) -> None:
    """Chat with a model in the terminal (like llama-cli), or answer piped text.

    Interactive when stdin is a terminal: /help lists the slash commands. When stdin is a pipe or a file, the whole input is one message and only the answer goes to stdout (see docs/chat.md).

    Exit status: 0 ok, 1 usage or request error, 2 model/load error, 130 interrupted.
    """
    from llamacli.chat import pipes
    from llamacli.chat.launch import start_session
    from llamacli.chat.settings import ChatSettings
    from llamacli.core.text.grammar import compile_grammar
    from llamacli.options.grammar import grammar_from_cli
    from llamacli.loading import open_draft, open_model
    from llamacli.media import open_projector, read_audio, read_image

    # ---- options -> plain values (nothing here touches the model) -------------------------
    if prompt is not None and file is not None:
        raise InvalidRequest("give the first message with -p or -f, not both")
    if system_prompt is not None and system_prompt_file is not None:
        raise InvalidRequest("give the system prompt with -sys or -sysf, not both")
    if as_json and as_jsonl:
        raise InvalidRequest("--json and --jsonl cannot be combined (--jsonl already prints JSON, one line per prompt)")
    first = read_text_file(file, "--file") if file is not None else prompt
    system = read_text_file(system_prompt_file, "--system-prompt-file") if system_prompt_file is not None else (system_prompt or "")
    template_src = model_load.template_source(chat_template, chat_template_file)
    by_lines = as_jsonl or batch_lines
    piped = not sys.stdin.isatty() and not simple_io
    if by_lines and not piped:
        raise InvalidRequest("--jsonl and --batch-lines read one prompt per line from stdin: pipe the prompts in")
    if (as_json or by_lines) and not piped:
        raise InvalidRequest("--json needs piped input (stdin is a terminal)")
        raise InvalidRequest("--tools answers one conversation at a time: not with --jsonl or --batch-lines")
    for flag, paths in (("--image", image), ("--audio", audio)):
        if paths and by_lines:
            raise InvalidRequest(f"{flag} goes with one conversation: not with --jsonl or --batch-lines")
        if paths and not may_have_projector(source, mmproj):
            raise InvalidRequest(no_projector(flag))
    if tool_choice != "auto" and not tools.enabled:
        raise InvalidRequest("--tool-choice needs --tools (or --mcp-servers-config/--mcp-servers-json)")
    spec = grammar_from_cli(grammar, grammar_file, json_schema, json_schema_file)
    settings = ChatSettings(sampling=sampling, n_predict=n_predict, stop=list(reverse_prompt or []), ignore_eos=sampling.ignore_eos,
                            grammar=spec, reasoning_budget=reasoning_budget, reasoning_budget_message=reasoning_budget_message)

    messages: list[str] = []
    if piped:
        text = sys.stdin.read()
        if by_lines:
            messages = pipes.batch_prompts(text, first)
            if not messages:
                raise InvalidRequest("no input: stdin has no non-blank line")
        else:
            one = pipes.join_message(first, text)
            if not one.strip():
                raise InvalidRequest("no input: stdin is empty (and no -p/-f message)")
            messages = [one]
    elif single_turn and not (first and first.strip()):
        raise InvalidRequest("--single-turn needs a first message (-p or -f)")

    model, mmproj = fetch_model(source, mmproj)
    if (image or audio) and mmproj.path is None:
        raise InvalidRequest(no_projector("--image" if image else "--audio"))
    # ---- load ----------------------------------------------------------------------------
    interactive = not piped
    use_color = want_color(color) if interactive and not simple_io else False
    adapters = lora_specs(lora, lora_scaled)
    if interactive and use_color:
        with err.status("loading model…", spinner="dots"):
            rt = open_model(model, numerics=numerics, threads=threads, loras=adapters, chat_template=template_src, use_jinja=jinja)
    else:
        rt = open_model(model, numerics=numerics, threads=threads, loras=adapters, chat_template=template_src, use_jinja=jinja)
    draft = open_draft(speculative.draft_model, rt, numerics, threads) if speculative.draft_model else None
    if spec is not None:  # a grammar that does not compile is an error now, not at every turn
        compile_grammar(rt.tokenizer, spec)
    n_slots = 1
    if by_lines:
        n_slots = min(len(messages), parallel if parallel > 0 else 8)
    engine, session = start_session(
        rt, settings, n_ctx=ctx_size, n_batch=batch_size, n_parallel=n_slots, system=system,
        speculative=speculative.config, draft_model=draft,
    )
    session.mtmd = open_projector(mmproj, rt.model.args.n_embd, threads)
    session.media_limits = mmproj.limits
    for path in image:
        session.attach(read_image(path, mmproj.limits))
    for path in audio:
        session.attach(read_audio(path, mmproj.limits))
    agent = None
    try:
        agent = _agent(tools, confirm_tools, tool_choice, interactive and use_color)
        if piped:
            io = pipes.PipeOutput(sys.stdout, err, show_timings)
            if by_lines:
                code = pipes.answer_lines(session, messages, io, as_json=as_json or as_jsonl)
            else:
                code = pipes.answer_once(session, messages[0], io, as_json=as_json, agent=agent)
        else:
            code = _interactive(session, first, use_color, multiline_input, single_turn, history_file, no_history,
                                show_timings, simple_io, agent)
    finally:
        engine.stop()
        if agent is not None:
            agent.box.close()
    if code:
        raise typer.Exit(code)


def _agent(tools: ToolOptions, confirm: bool, choice: str, spinner: bool) -> Agent | None:
    """The tool loop over --tools/--mcp-servers-*, its MCP servers' tools listed (or None)."""
    import os

    from llamacli.chat.agent import CHOICES, Agent
    from llamacli.options.tools import open_toolbox

    if not tools.enabled:
        return None
    box = open_toolbox(tools, lambda _msg: None, errlog=open(os.devnull, "w"))  # the view shows every call
    assert box is not None
    if tools.mcp:
        if spinner:
            with err.status("starting MCP servers…", spinner="dots"):
                box.start()
        else:
            box.start()
    if choice not in CHOICES and choice not in {t.name for t in box.tools}:
        box.close()
        raise InvalidRequest(f"--tool-choice {choice}: not auto, required, none or one of the tools "
                             f"({', '.join(t.name for t in box.tools)})")
    return Agent(box, confirm=confirm, choice=choice)


def _interactive(session, first, use_color, multiline, single_turn, history_file, no_history, show_timings, simple_io, agent) -> int:  # type: ignore[no-untyped-def]
    from llamacli.chat.render import PlainView, RichView
    from llamacli.chat.repl import ChatLoop

    if simple_io:
        view = PlainView(sys.stdout, show_stats=show_timings)

        def read() -> str:
            sys.stdout.write("> ")
            sys.stdout.flush()
            return input()

        loop = ChatLoop(session, read, view, multiline=False, agent=agent)
    else:
        from rich.console import Console

        from llamacli.chat.prompt import default_history_path, make_asker, make_reader

        if use_color:
            view = RichView(Console(highlight=False), show_stats=show_timings)  # type: ignore[assignment]
        else:
            view = PlainView(sys.stdout, show_stats=show_timings)
        hist = None if no_history else (history_file or default_history_path())
        loop = ChatLoop(session, lambda: "", view, multiline=multiline, agent=agent, ask=make_asker(color=use_color))
        loop.read = make_reader(lambda: loop.multiline, hist, color=use_color)
    info = session.info
    if not single_turn:
        view.info(
            f"llama chat · {info.name or info.file_name} ({info.architecture}) · context {session.n_ctx} · "
            f"template {session.template.name}\n/help for commands · Alt+Enter inserts a newline · Ctrl-C stops a reply · Ctrl-D exits"
        )
        if agent is not None:
            view.info(f"tools: {', '.join(t.name for t in agent.box.tools) or 'none'} (working directory "
                      f"{agent.box.sandbox.root}) · /tools lists them")
    return loop.run(first, single_turn=single_turn)

