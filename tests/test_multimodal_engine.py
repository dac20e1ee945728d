"""Images through the engine (demo model + the synthetic gemma3 projector): the task's prompt
holds media placeholders, the batch feeds the image's embeddings with non-causal attention,
and the prompt cache reuses an image only when its bytes are the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.load import load_model
from llamacli.core.multimodal.encoder import VisionEncoder
from llamacli.core.multimodal.prompt import Media, prompt_with_media
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.runtime.tasks import Task, TaskParams
from llamacli.core.sampling import SamplingParams
from llamacli.core.speculative.config import SpecConfig
from llamacli.core.text.tokenizer import load_tokenizer
from scripts.mmproj_fixtures import PROMPT
from tests.tiny_mmproj import SPECS, test_image, write_projector

FIXTURES = Path(__file__).parent / "fixtures" / "mmproj"


@pytest.fixture(scope="module")
def demo_vision(demo_model: str, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    model, g, _ = load_model(demo_model, numerics="ggml")
    tok = load_tokenizer(g.metadata)
    path = write_projector(SPECS["gemma3"], tmp_path_factory.mktemp("mm") / "gemma3.gguf")
    return model, tok, VisionEncoder.load(str(path), n_embd_text=model.args.n_embd)


def _greedy(n: int) -> TaskParams:
    return TaskParams(n_predict=n, sampling=SamplingParams(temperature=0.0))


def test_image_prompt_through_the_engine(demo_vision) -> None:  # type: ignore[no-untyped-def]
    model, tok, enc = demo_vision
    fx = np.load(FIXTURES / "gemma3.npz")
    image = Media.of(fx["image1"])
    tokens, spans = prompt_with_media(PROMPT, [image], enc, tok)
    assert [t for t in tokens if t >= 0] == fx["e2e_tokens"].tolist() and len(spans) == 1
    assert spans[0].start == 9 and spans[0].end == 25 and all(t < -1 for t in tokens[9:25])
    n0 = enc.n_encoded
    with Engine(model, tok, EngineConfig(n_ctx=256, n_batch=64)) as eng:
        first = eng.run(Task(tokens, _greedy(4), media=spans))
        assert first.error is None and first.tokens[0] == int(fx["e2e_top_ids"][0])  # llama.cpp's next token
        assert first.timings.prompt_n == len(tokens)
        # a second turn about the same image: the encoder does not run, the cache covers the image
        tokens2, spans2 = prompt_with_media(PROMPT + "A picture.<end_of_turn>\n<start_of_turn>user\nMore?", [image], enc, tok)
        second = eng.run(Task(tokens2, _greedy(2), media=spans2))
        assert enc.n_encoded == n0
        assert second.tokens_cached >= spans2[0].end
        # another image at the same place: the cache stops where the images differ
        other = Media.of(test_image(50, 50, seed=5))
        tokens3, spans3 = prompt_with_media(PROMPT, [other], enc, tok)
        third = eng.run(Task(tokens3, _greedy(1), media=spans3))
        assert third.tokens_cached == spans3[0].start
        assert enc.n_encoded == n0 + 1


def test_an_image_never_straddles_batches(demo_vision) -> None:  # type: ignore[no-untyped-def]
    """n_batch 20 with the image at prompt positions 9..25: the first chunk stops before it, the
    image goes whole in the next one; the result equals one big batch's."""
    model, tok, enc = demo_vision
    fx = np.load(FIXTURES / "gemma3.npz")
    tokens, spans = prompt_with_media(PROMPT, [Media.of(fx["image1"])], enc, tok)
    with Engine(model, tok, EngineConfig(n_ctx=64, n_batch=20)) as eng:
        small = eng.run(Task(tokens, _greedy(3), media=spans))
    with Engine(model, tok, EngineConfig(n_ctx=64, n_batch=64)) as eng:
        big = eng.run(Task(tokens, _greedy(3), media=spans))
    assert small.error is None and small.tokens == big.tokens


def test_media_tasks_refused_where_llama_server_refuses(demo_vision) -> None:  # type: ignore[no-untyped-def]
    model, tok, enc = demo_vision
    tokens, spans = prompt_with_media("<__media__>", [Media.of(test_image(8, 8))], enc, tok)
    with Engine(model, tok, EngineConfig(n_ctx=64, n_batch=8)) as eng:
        with pytest.raises(InvalidRequest, match="an image takes 16 tokens in one batch"):
            eng.submit(Task(tokens, _greedy(1), media=spans))
    spec = SpecConfig(types=("ngram-simple",))
    with Engine(model, tok, EngineConfig(n_ctx=64, speculative=spec)) as eng:
        with pytest.raises(InvalidRequest, match="speculative decoding is not supported with media"):
            eng.submit(Task(tokens, _greedy(1), media=spans))
