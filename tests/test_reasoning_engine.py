"""The reasoning budget in the engine, with the demo model steered into a thinking block (a
grammar opens it; a logit bias bans "<" so that the model never closes it on its own): after N
thinking tokens the engine itself writes the budget message and the end tag, token by token,
and `Task.request_reasoning_end` does the same on demand."""

from __future__ import annotations

from typing import Any

import pytest
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.grammar import GrammarSpec
from llamacli.core.model.load import load_model
from llamacli.core.text.reasoning import ReasoningBudgetSpec
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.tasks import Final, Partial, Task, TaskParams
from llamacli.core.text.tokenizer import load_tokenizer

pytestmark = pytest.mark.slow

GRAMMAR = GrammarSpec.gbnf('root ::= "<think>" [^<]* "</think>" [^<]*')


@pytest.fixture(scope="module")
def demo(demo_model: str) -> Any:
    model, _, _ = load_model(demo_model)
    tok = load_tokenizer(read_metadata(demo_model))
    with Engine(model, tok, EngineConfig(n_ctx=2048, n_parallel=2)) as eng:
        yield eng, tok


def params(tok: Any, n_predict: int, reasoning: ReasoningBudgetSpec | None) -> TaskParams:
    lt = tok.tokenize("<", add_special=False)[0]
    return TaskParams(n_predict=n_predict, grammar=GRAMMAR, reasoning=reasoning,
                      sampling=SamplingParams(temperature=0.0, logit_bias=[(lt, -100.0)]))


def thinking_starts(tok: Any, tokens: list[int]) -> int:
    """Index of the first token after the one that completes "<think>"."""
    for k in range(1, len(tokens) + 1):
        if tok.detokenize(tokens[:k]).endswith("<think>"):
            return k
    raise AssertionError(f"no <think> in {tok.detokenize(tokens)!r}")


def prompt(tok: Any) -> list[int]:
    return tok.tokenize("<start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n", True, True)


def test_budget_forces_message_and_end_tag(demo: Any) -> None:
    eng, tok = demo
    spec = ReasoningBudgetSpec(budget=4, message=" Enough.")
    final = eng.run(Task(prompt(tok), params(tok, 24, spec)))
    forced = tok.tokenize(" Enough.</think>", add_special=False, parse_special=True)
    k = thinking_starts(tok, final.tokens)
    assert final.tokens[k + 4 : k + 4 + len(forced)] == forced, tok.detokenize(final.tokens)
    assert tok.detokenize(final.tokens).count("</think>") == 1
    # without a budget the block never closes (the bias bans "<"): the forcing came from the engine
    free = eng.run(Task(prompt(tok), params(tok, 24, None)))
    assert "</think>" not in tok.detokenize(free.tokens)


def test_forced_open_prompt_counts_from_the_first_token(demo: Any) -> None:
    eng, tok = demo
    lt = tok.tokenize("<", add_special=False)[0]
    spec = ReasoningBudgetSpec(budget=3, forced_open=True)  # the prompt ends inside the block
    p = TaskParams(n_predict=10, reasoning=spec, sampling=SamplingParams(temperature=0.0, logit_bias=[(lt, -100.0)]))
    final = eng.run(Task(prompt(tok) + tok.tokenize("<think>\n", False, True), p))
    assert final.tokens[3 : 3 + 3] == tok.tokenize("</think>", add_special=False, parse_special=True)


def test_request_reasoning_end(demo: Any) -> None:
    eng, tok = demo
    task = eng.submit(Task(prompt(tok), params(tok, 40, ReasoningBudgetSpec(control=True))))
    n_seen = 0
    final = None
    for r in task.results:
        if isinstance(r, Partial) and r.tokens:
            n_seen += 1
            if n_seen == 6:
                assert task.request_reasoning_end()
        elif isinstance(r, Final):
            final = r
    assert final is not None and final.stop_type in ("limit", "eos")
    text = tok.detokenize(final.tokens)
    assert text.count("</think>") == 1 and text.index("</think>") < len(text) - len("</think>")
    # a task started without control refuses
    plain = Task(prompt(tok), params(tok, 1, ReasoningBudgetSpec(budget=5)))
    assert not plain.request_reasoning_end()


def test_llama_chat_reasoning_budget(demo_model: str) -> None:
    """`llama chat --reasoning-budget`: the forced end tag closes the block, the thoughts fold
    into one line and the answer follows."""
    from tests.test_cli import llama

    r = llama("chat", "-m", demo_model, "-p", "Name a colour.", "-st", "--simple-io", "--temp", "0", "-n", "20",
              "--grammar", 'root ::= "<think>" [^<]* "</think>" [^<]*', "-l", "236820-100",
              "--reasoning-budget", "3", "--reasoning-budget-message", " Enough.", "--no-show-timings")
    assert r.returncode == 0, r.stderr
    folded, answer = r.stdout.split("\n", 1)
    assert folded.startswith("[▸ thought for ") and answer.strip() and "<" not in answer
