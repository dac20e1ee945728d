"""core/model/loaded.py: the loaded-model object the REPL and the server share, and its special
tokens read as llama.cpp reads them.

Expected values come from the files the tests write (tests/tiny_models.py) and from llama.cpp's
rules, which llama-cpp-python 0.3.36 (llama_vocab_bos/eos, llama_token_to_piece with special,
llama_vocab_get_add_bos/eos) reports the same for these files:
- tiny llama (SPM): BOS 1 "<s>", EOS 2 "</s>", add_bos true (the file says so; without the key
  SPM's default is true as well);
- tiny qwen2 (GPT-2 BPE, add_bos_token false): BOS "<|endoftext|>", EOS "<|im_end|>";
- tiny qwen2 with the chatglm-bpe pre-tokenizer and no bos_token_id: no BOS at all (-1 in
  llama.cpp), so the template's bos_token is "" and /props reports "".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llamacli.chat.launch import start_session
from llamacli.chat.settings import ChatSettings
from llamacli.core.text.chat_templates import ChatTemplateError
from llamacli.core.model.loaded import SpecialTokens, load
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from llamacli.http.state import ServingEngine
from llamacli.loading import open_model
from tests.http_app_client import Client
from tests.tiny_models import rewrite_gguf, special_ids, tiny_config, vocab_size, write_tiny_model

BOS_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}{{ eos_token }}"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("loaded")
    llama = write_tiny_model("llama", "F32", d / "llama.gguf")
    qwen2 = write_tiny_model("qwen2", "F32", d / "qwen2.gguf")
    return {
        "llama": llama,
        "qwen2": qwen2,
        # an SPM file that does not say whether BOS is added (llama.cpp: SPM adds it)
        "llama_no_add_key": rewrite_gguf(llama, d / "llama_no_add_key.gguf", drop_keys=("tokenizer.ggml.add_bos_token",),
                                         set_strings={"tokenizer.chat_template": BOS_TEMPLATE}),
        "no_bos": rewrite_gguf(qwen2, d / "no_bos.gguf", drop_keys=("tokenizer.ggml.bos_token_id",),
                               set_strings={"tokenizer.ggml.pre": "chatglm-bpe", "tokenizer.chat_template": BOS_TEMPLATE}),
    }


def test_model_info_of_a_tiny_model(files: dict[str, Path]) -> None:
    m = load(files["llama"])
    info = m.info
    ids = special_ids("llama")
    assert info.special == SpecialTokens(bos=ids["bos"], eos=ids["eos"], bos_text="<s>", eos_text="</s>", add_bos=True)
    cfg = tiny_config("llama")
    assert (info.name, info.architecture, info.file_name) == ("tiny-llama-F32", "llama", "llama.gguf")
    assert (info.n_vocab, info.n_ctx_train, info.n_embd) == (vocab_size("llama"), cfg.n_ctx_train, cfg.n_embd)
    assert info.size == files["llama"].stat().st_size and info.vocab_type == 1  # LLAMA_VOCAB_TYPE_SPM
    assert info.n_params == sum(t.n_elements for t in m.gguf.tensors.values())
    assert info.tokenizer is m.tokenizer and info.template is not None
    assert (info.template.bos_token, info.template.eos_token, info.template.add_bos) == ("<s>", "</s>", True)

    q = load(files["qwen2"]).info
    qids = special_ids("qwen2")
    assert q.special == SpecialTokens(bos=qids["bos"], eos=qids["eos"], bos_text="<|endoftext|>", eos_text="<|im_end|>")
    assert q.vocab_type == 2  # LLAMA_VOCAB_TYPE_BPE


def test_the_template_drops_bos_when_the_tokenizer_adds_it(files: dict[str, Path]) -> None:
    """llama.cpp gives the template llama_vocab_get_add_bos (true for SPM without the key) and
    drops a leading BOS text from its output: the prompt starts with one BOS, not two."""
    m = load(files["llama_no_add_key"])
    assert m.info.special.add_bos
    assert m.template is not None
    prompt = m.template.render(HI, add_generation_prompt=False)
    assert prompt == "hi</s>"
    toks = m.tokenizer.tokenize(prompt, add_special=True, parse_special=True)
    assert toks[0] == 1 and toks[1] != 1


def test_a_model_without_bos(files: dict[str, Path]) -> None:
    m = load(files["no_bos"])
    qids = special_ids("qwen2")
    assert m.info.special == SpecialTokens(bos=None, eos=qids["eos"], bos_text="", eos_text="<|im_end|>")
    assert m.template is not None and m.template.render(HI, add_generation_prompt=False) == "hi<|im_end|>"
    engine = Engine(m.model, m.tokenizer, EngineConfig(n_ctx=64, n_parallel=1))
    assert isinstance(engine, ServingEngine)
    d = Client(create_app(engine, ServerConfig(), m.info)).get("/props")[1]
    assert (d["bos_token"], d["eos_token"]) == ("", "<|im_end|>")


def test_the_repl_and_the_server_report_the_same_model(files: dict[str, Path]) -> None:
    """One ModelInfo, built at load: the chat session shows it and the server reports it."""
    rt = open_model(str(files["llama"]), chat_template="chatml")
    assert rt.info.template is not None and rt.info.template.name == "chatml"
    engine, session = start_session(rt, ChatSettings(), n_ctx=64)
    try:
        assert session.info is rt.info and session.template is rt.info.template
        c = Client(create_app(engine, ServerConfig(), rt.info))
        props = c.get("/props")[1]
        assert (props["bos_token"], props["eos_token"], props["model_path"]) == ("<s>", "</s>", str(files["llama"]))
        meta = c.get("/v1/models")[1]["data"][0]["meta"]
        assert (meta["n_vocab"], meta["n_ctx_train"], meta["size"]) == (rt.info.n_vocab, rt.info.n_ctx_train, rt.info.size)
    finally:
        engine.stop()


def test_complete_loads_without_a_template(files: dict[str, Path]) -> None:
    """`llama complete` renders no chat template: a template that does not compile is no error."""
    bad = rewrite_gguf(files["llama"], files["llama"].with_name("bad_template.gguf"),
                       set_strings={"tokenizer.chat_template": "{% for %}"})
    assert open_model(str(bad), with_template=False).info.template is None
    with pytest.raises(ChatTemplateError):
        open_model(str(bad))
