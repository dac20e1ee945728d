"""Chat templates: built-ins against llama.cpp's C++ output, the real templates llama.cpp ships,
template selection for GGUF metadata (the demo model), Jinja behaviour and the sandbox."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import pytest

from llamacli.core.text.chat_templates import (
    BUILTIN_NAMES,
    ChatTemplate,
    ChatTemplateError,
    check_override,
    default_builtin,
    detect_builtin,
    format_builtin,
)
from llamacli.core.text.chat_templates.jinja_env import compile_template
from llamacli.core.errors import LlamaError
from sdist_cache import llama_cpp_path

FIXTURES = Path(__file__).parent / "fixtures" / "chat_templates"
BUILTIN_FIXTURE = json.loads((FIXTURES / "builtin_outputs.json").read_text(encoding="utf-8"))
DETECT_FIXTURE = json.loads((FIXTURES / "detect_outputs.json").read_text(encoding="utf-8"))

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye"},
]
TOOL_CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "18°C, sunny"},
    {"role": "assistant", "content": "It is 18°C and sunny."},
    {"role": "user", "content": "Thanks!"},
]
GEMMA3_MD = {  # the demo model's metadata (Gemma 3 270M): no tokenizer.chat_template
    "general.architecture": "gemma3",
    "gemma3.block_count": 18,
    "tokenizer.ggml.model": "llama",
    "tokenizer.ggml.add_bos_token": True,
}


def turns(conversation: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in conversation]


@pytest.fixture(scope="module")
def templates_dir() -> Path:
    return llama_cpp_path("models/templates")


def load(templates_dir: Path, name: str, **kwargs: object) -> ChatTemplate:
    return ChatTemplate.from_source((templates_dir / name).read_text(encoding="utf-8"), **kwargs)  # type: ignore[arg-type]


# --- built-in formats against llama.cpp's llm_chat_apply_template --------------------------


def test_builtin_names_are_llama_cpps() -> None:
    assert list(BUILTIN_NAMES) == sorted(BUILTIN_FIXTURE["outputs"])
    for name in ("chatml", "llama2", "llama3", "gemma", "mistral-v7", "phi3", "zephyr", "deepseek3", "command-r"):
        assert name in BUILTIN_NAMES


@pytest.mark.parametrize("name", sorted(BUILTIN_FIXTURE["outputs"]))
def test_builtin_matches_llama_cpp(name: str) -> None:
    for conv, outputs in BUILTIN_FIXTURE["outputs"][name].items():
        chat = turns(BUILTIN_FIXTURE["conversations"][conv])
        for add_ass, expected in outputs.items():
            assert format_builtin(name, chat, add_ass == "True") == expected, (conv, add_ass)
            rendered = ChatTemplate.from_source(name).render(
                BUILTIN_FIXTURE["conversations"][conv], add_generation_prompt=add_ass == "True"
            )
            assert rendered == expected


@pytest.mark.parametrize("filename", sorted(DETECT_FIXTURE["outputs"]))
def test_detection_matches_llama_cpp(templates_dir: Path, filename: str) -> None:
    source = (templates_dir / filename).read_text(encoding="utf-8")
    name = detect_builtin(source)
    expected = DETECT_FIXTURE["outputs"][filename]
    chat = turns(BUILTIN_FIXTURE["conversations"][DETECT_FIXTURE["conversation"]])
    assert (None if name is None else format_builtin(name, chat, True)) == expected


# --- the real templates llama.cpp ships ------------------------------------------------------


def all_template_names() -> list[str]:
    return sorted(DETECT_FIXTURE["outputs"])


@pytest.mark.parametrize("filename", all_template_names())
def test_real_template_renders_or_refuses_cleanly(templates_dir: Path, filename: str) -> None:
    tmpl = load(templates_dir, filename, bos_token="<s>", eos_token="</s>")
    assert tmpl.is_jinja
    for conversation, tools in ((CHAT, None), (TOOL_CHAT, [WEATHER_TOOL])):
        try:
            out = tmpl.render(conversation, tools=tools)
        except ChatTemplateError as exc:  # a template may reject a conversation: only this way
            assert str(exc)
            continue
        assert isinstance(out, str)
        assert conversation[1]["content"] in out
        assert tmpl.render(conversation, tools=tools) == out  # deterministic, inputs untouched
    assert CHAT[0] == {"role": "system", "content": "You are terse."}
    assert TOOL_CHAT[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'


@pytest.mark.parametrize(
    ("filename", "builtin", "system"),
    [
        ("Qwen-Qwen2.5-7B-Instruct.jinja", "chatml", True),
        ("Qwen-Qwen3-0.6B.jinja", "chatml", True),
        ("Qwen-Qwen3-0.6B.jinja", "chatml", False),
        ("LFM2-8B-A1B.jinja", "chatml", True),
        ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3", True),
        ("meta-llama-Llama-3.3-70B-Instruct.jinja", "llama3", True),
        ("google-gemma-2-2b-it.jinja", "gemma", False),
        ("microsoft-Phi-3.5-mini-instruct.jinja", "phi3", True),
        ("ibm-granite-granite-4.1.jinja", "granite-4.1", True),
        ("ByteDance-Seed-OSS.jinja", "seed_oss", True),
        ("moonshotai-Kimi-K2.jinja", "kimi-k2", True),
    ],
)
def test_builtin_equals_its_jinja_original(templates_dir: Path, filename: str, builtin: str, system: bool) -> None:
    chat = CHAT if system else CHAT[1:]
    jinja = load(templates_dir, filename, bos_token="<BOS>", eos_token="<EOS>", add_bos=True)
    assert jinja.detected == builtin
    rendered = jinja.render(chat, date_string="26 Jul 2024")
    if builtin == "llama3":  # Llama 3.1 writes its knowledge/date lines into the system turn
        date = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        chat = [{"role": "system", "content": date + chat[0]["content"]}, *chat[1:]]
    for add in (True, False):
        jinja_out = jinja.render(chat if builtin != "llama3" else CHAT, add, date_string="26 Jul 2024")
        if not add:  # Phi-3.5 ends a conversation without generation prompt with EOS
            jinja_out = jinja_out.removesuffix("<EOS>")
        assert jinja_out == ChatTemplate.from_source(builtin).render(chat, add)
    assert not rendered.startswith("<BOS>")  # the tokenizer adds BOS: llama.cpp strips it


def test_template_without_system_role_gets_it_merged(templates_dir: Path) -> None:
    gemma2 = load(templates_dir, "google-gemma-2-2b-it.jinja", bos_token="<bos>", add_bos=True)
    assert gemma2.caps is not None and not gemma2.caps.supports_system_role
    out = gemma2.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert out == "<start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\n"
    with pytest.raises(ChatTemplateError, match="alternate"):
        gemma2.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_tool_calls_reach_the_template(templates_dir: Path) -> None:
    qwen = load(templates_dir, "Qwen-Qwen2.5-7B-Instruct.jinja")
    out = qwen.render(TOOL_CHAT, tools=[WEATHER_TOOL])
    assert json.dumps(WEATHER_TOOL, ensure_ascii=False) in out  # HF tojson: ", " and ": "
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in out  # string args -> object
    assert "<tool_response>\n18°C, sunny\n</tool_response>" in out
    nemo = load(templates_dir, "mistralai-Mistral-Nemo-Instruct-2407.jinja")
    assert "[TOOL_CALLS]" in nemo.render(TOOL_CHAT[1:], tools=[WEATHER_TOOL])


def test_llama31_date_defaults_to_today(templates_dir: Path) -> None:
    out = load(templates_dir, "meta-llama-Llama-3.1-8B-Instruct.jinja").render(CHAT)
    assert f"Today Date: {datetime.datetime.now():%d %b %Y}" in out


def test_render_is_fast_after_first_use(templates_dir: Path) -> None:
    source = (templates_dir / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    tmpl = ChatTemplate.from_source(source)
    assert compile_template(tmpl.source) is compile_template(tmpl.source)  # compiled once
    tmpl.render(CHAT)
    start = time.process_time()  # CPU time: not stretched by other processes
    for _ in range(50):
        tmpl.render(CHAT)
    assert (time.process_time() - start) / 50 < 0.01


# --- choosing a template from GGUF metadata ----------------------------------------------------


def test_demo_model_gets_gemma_turns() -> None:
    tmpl = ChatTemplate.from_metadata(GEMMA3_MD, bos_token="<bos>", eos_token="<eos>")
    assert tmpl.name == "gemma" and not tmpl.is_jinja and tmpl.add_bos
    out = tmpl.render(
        [
            {"role": "system", "content": " Be brief. "},
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "image_url"}, {"type": "text", "text": "you"}]},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "Bye"},
        ]
    )
    assert out == (
        "<start_of_turn>user\nBe brief.\n\nHello\nyou<end_of_turn>\n"
        "<start_of_turn>model\nHi!<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_default_when_the_file_has_no_template() -> None:
    assert default_builtin({"general.architecture": "llama"}) == "chatml"  # llama.cpp's default
    assert default_builtin({"general.architecture": "gemma2"}) == "gemma"
    tekken = {"general.architecture": "llama", "tokenizer.ggml.pre": "tekken", "llama.block_count": 40}
    assert default_builtin(tekken) == "mistral-v7-tekken"  # llama.cpp's one-off for Mistral-Small-2503
    assert ChatTemplate.from_metadata({}).name == "chatml"


def test_metadata_template_variants_and_overrides() -> None:
    md = {
        "general.architecture": "qwen2",
        "tokenizer.chat_template": "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}",
        "tokenizer.chat_template.tool_use": "TOOLS:{{ tools | length }}{{ messages[-1].content }}",
        "tokenizer.chat_template.rag": "RAG:{{ messages[0].content }}",
    }
    msgs = [{"role": "user", "content": "q"}]
    tmpl = ChatTemplate.from_metadata(md)
    assert tmpl.is_jinja and tmpl.render(msgs) == "[user]q"
    assert tmpl.render(msgs, tools=[WEATHER_TOOL]) == "TOOLS:1q"  # the tool_use variant
    assert ChatTemplate.from_metadata(md, name="rag").render(msgs) == "RAG:q"
    assert ChatTemplate.from_metadata(md, name="tool_use").render(msgs) == "TOOLS:0q"
    with pytest.raises(ChatTemplateError, match="no chat template named 'nope'.*rag"):
        ChatTemplate.from_metadata(md, name="nope")
    assert ChatTemplate.from_metadata(md, override="zephyr").render(msgs) == "<|user|>\nq<|endoftext|>\n<|assistant|>\n"
    assert ChatTemplate.from_metadata(md, override="<{{ messages[0].content }}>").render(msgs) == "<q>"
    only_tools = {"tokenizer.chat_template.tool_use": "T{{ messages[0].content }}"}
    assert ChatTemplate.from_metadata(only_tools).render(msgs) == "Tq"


def test_an_override_is_a_builtin_name_or_jinja_source() -> None:
    """As llama.cpp: text with {% or {{ is a template, anything else must name a built-in one;
    a mistyped name was taken as a template that rendered the name itself."""
    md = {"tokenizer.chat_template": "{{ messages[0].content }}"}
    for value in ("chatml", "gemma", "{{ messages[0].content }}", "{% for m in messages %}{% endfor %}"):
        check_override(value)
        ChatTemplate.from_metadata(md, override=value)
    for value in ("nosuchtemplate", "ChatML", "plain text"):
        with pytest.raises(ChatTemplateError, match=f"^unknown chat template '{value}': .* chatml, .*zephyr$"):
            ChatTemplate.from_metadata(md, override=value)


def test_no_jinja_uses_the_detected_builtin() -> None:
    md = {"tokenizer.chat_template": "{{ '<start_of_turn>' }}{{ messages }}"}
    tmpl = ChatTemplate.from_metadata(md, use_jinja=False)
    assert tmpl.name == "gemma" and tmpl.render([{"role": "user", "content": "x"}]).startswith("<start_of_turn>user\nx")
    with pytest.raises(ChatTemplateError, match="not supported without Jinja"):
        ChatTemplate.from_metadata({"tokenizer.chat_template": "{{ messages }}"}, use_jinja=False)


def test_bos_and_eos_are_template_variables() -> None:
    md = {"tokenizer.chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}
    msgs = [{"role": "user", "content": "x"}]
    assert ChatTemplate.from_metadata(md, bos_token="<s>", eos_token="</s>").render(msgs) == "<s>x</s>"
    stripped = ChatTemplate.from_metadata(md, bos_token="<s>", eos_token="</s>", add_bos=True, add_eos=True)
    assert stripped.render(msgs) == "x"


# --- Jinja behaviour as in transformers -----------------------------------------------------------


def jinja(source: str, **extra: object) -> str:
    return ChatTemplate.from_source(source).render([{"role": "user", "content": "hi"}], **extra)


def test_tojson_like_transformers() -> None:
    value = {"a": "é<b>", "b": [1, 2], "c": None}
    assert jinja("{{ v | tojson }}", v=value) == '{"a": "é<b>", "b": [1, 2], "c": null}'
    assert jinja("{{ v | tojson(indent=2) }}", v=value) == json.dumps(value, ensure_ascii=False, indent=2)
    assert jinja("{{ v | tojson(ensure_ascii=True) }}", v=value) == json.dumps(value)
    assert jinja("{{ v | tojson(separators=(',', ':')) }}", v=value) == '{"a":"é<b>","b":[1,2],"c":null}'
    assert jinja("{{ v | map(attribute='x') | tojson }}", v=[{"x": 1}, {"x": 2}]) == "[1, 2]"


def test_jinja_features_templates_use() -> None:
    assert jinja("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}") == "02"
    assert jinja("{{ ' a,b '.strip().split(',') | join('|') }}{{ 'xyz'.startswith('x') }}{{ 'ab'.upper() }}") == "a|bTrueAB"
    assert jinja("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}") == "1"
    assert jinja("{{ strftime_now('%Y') }}") == str(datetime.datetime.now().year)
    assert jinja("{% generation %}kept{% endgeneration %}") == "kept"
    assert jinja("{% if true %}\n  A\n{% endif %}\nB") == "  A\nB"  # trim_blocks + lstrip_blocks
    assert jinja("{{ add_generation_prompt }}|{{ x }}", x=3) == "True|3"
    assert jinja("{% set l = [] %}{% set _ = l.append(1) %}{{ l }}") == "[1]"


def test_raise_exception_carries_the_templates_message() -> None:
    with pytest.raises(ChatTemplateError, match="Only user and assistant roles"):
        jinja("{{ raise_exception('Only user and assistant roles are supported!') }}")
    assert issubclass(ChatTemplateError, LlamaError)


@pytest.mark.parametrize(
    "source",
    [
        "{% for m in messages %}{{ m.content }",
        "{% if %}",
        "{% endfor %}",
        "{% unknown_tag %}",
    ],
)
def test_syntax_errors_are_template_errors(source: str) -> None:
    with pytest.raises(ChatTemplateError, match="syntax error"):
        ChatTemplate.from_source(source)


@pytest.mark.parametrize(
    "source",
    ["{{ undefined_thing.x }}", "{{ 1 / 0 }}", "{{ messages[5].content }}", "{{ 'a' + 1 }}", "{% include 'x.jinja' %}"],
)
def test_runtime_errors_are_template_errors(source: str) -> None:
    with pytest.raises(ChatTemplateError):
        jinja(source)


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ raise_exception.__globals__ }}",
        "{{ messages.__class__ }}",
        "{{ self.__init__.__globals__.__builtins__.open('/etc/passwd').read() }}",
        "{{ namespace.__init__.__globals__ }}",
        "{{ strftime_now.__globals__['datetime'] }}",
        "{{ messages[0].update({'role': 'x'}) }}",
        "{{ 'x' * 100000000 }}",
        "{{ 10 ** 100000000 }}",
    ],
)
def test_sandbox_blocks_escapes(source: str) -> None:
    with pytest.raises(ChatTemplateError):
        jinja(source)


def test_templates_cannot_read_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    for source in (
        f"{{% include '{secret}' %}}",
        f"{{% import '{secret}' as s %}}",
        f"{{% extends '{secret}' %}}",
        f"{{% from '{secret}' import x %}}",
    ):
        with pytest.raises(ChatTemplateError):
            jinja(source)


def test_bad_messages_are_template_errors() -> None:
    tmpl = ChatTemplate.from_source("chatml")
    for bad in ([{"content": "no role"}], ["text"], "text", [{"role": "user", "content": 3}]):
        with pytest.raises(ChatTemplateError):
            tmpl.render(bad)  # type: ignore[arg-type]
