"""Every JSON-schema-constrained answer of the demo model parses and validates: the corpus in
fixtures/grammar/schemas.json (nested objects, arrays, enums, patterns, bounded numbers,
required/optional, anyOf/oneOf/allOf, $ref/$defs/definitions, additional/pattern properties,
formats), greedy and sampled at temperature 1.0, all schemas in one continuous batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llamacli.core.text.chat_templates import ChatTemplate
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.grammar import GrammarSpec
from llamacli.core.model.load import load_model
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.core.text.tokenizer import load_tokenizer

jsonschema = pytest.importorskip("jsonschema")
pytestmark = pytest.mark.slow

CORPUS = json.loads((Path(__file__).parent / "fixtures" / "grammar" / "schemas.json").read_text())
GENERATED = [e for e in CORPUS["schemas"] if e["generate"]]


@pytest.fixture(scope="module")
def demo_engine(demo_model: str):  # type: ignore[no-untyped-def]
    model, _, _ = load_model(demo_model)
    md = read_metadata(demo_model)
    tok = load_tokenizer(md)
    tmpl = ChatTemplate.from_metadata(md, bos_token="<bos>", eos_token="<eos>")
    n = len(GENERATED)
    with Engine(model, tok, EngineConfig(n_ctx=n * 384, n_parallel=n)) as eng:
        yield eng, tok, tmpl


def test_corpus_size() -> None:
    assert len(CORPUS["schemas"]) >= 30 and len(GENERATED) >= 30


@pytest.mark.parametrize("temperature, seed", [(0.0, 0), (1.0, 1), (1.0, 2)])
def test_constrained_outputs_validate(demo_engine, temperature: float, seed: int) -> None:  # type: ignore[no-untyped-def]
    eng, tok, tmpl = demo_engine
    tasks = []
    for i, e in enumerate(GENERATED):
        ask = f"Reply with JSON for this schema:\n{json.dumps(e['schema'])}"
        prompt = tok.tokenize(tmpl.render([{"role": "user", "content": ask}]), add_special=True, parse_special=True)
        params = TaskParams(
            n_predict=256,
            sampling=SamplingParams(temperature=temperature, seed=seed * 1000 + i),
            grammar=GrammarSpec.json_schema(e["schema"]),
        )
        tasks.append((e, eng.submit(Task(prompt, params))))
    failures = []
    for e, task in tasks:
        final = next(r for r in task.results if isinstance(r, Final))
        try:
            assert final.stop_type == "eos", f"stopped by {final.stop_type}"
            value = json.loads(final.content)
            cls = jsonschema.validators.validator_for(e["schema"])
            cls(e["schema"], format_checker=cls.FORMAT_CHECKER).validate(value)
        except Exception as ex:  # noqa: BLE001 - collect every failure, report them together
            failures.append(f"{e['name']}: {final.content!r}: {str(ex)[:200]}")
    assert not failures, "\n".join(failures)
