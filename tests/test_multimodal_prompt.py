"""Prompt chunks with media (core/multimodal/prompt.py) and the non-causal attention of image
chunks (Batch.non_causal, ops.attention_mask's see_upto), without a model."""

from __future__ import annotations


import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import plan_attention
from llamacli.core.model.kernels.ops import attention_mask
from llamacli.core.model.state.batch import Batch
from llamacli.core.multimodal.media import Media
from llamacli.core.multimodal.media_encoder import Framing, MediaEncoder
from llamacli.core.multimodal.prompt import (
    MediaChunk, MediaSpan, TextChunk, flatten, media_token, snap_out_of_media, split_markers, tokenize_prompt,
)
from llamacli.core.runtime.batch_plan import SlotFeed, build_batch
from llamacli.core.runtime.scheduler import Chunk, SlotState, schedule


class FakeEncoder(MediaEncoder):
    kind, framing, n_embd = "image", Framing("<soi>", "<eoi>", True), 4

    def encode_chunks(self, media: Media) -> list[np.ndarray]:
        return [np.full((3, 4), float(media.rgb[0, 0, 0]), dtype=np.float32)]


def _tok(text: str) -> list[int]:
    return [ord(c) for c in text.replace("<soi>", "\x01").replace("<eoi>", "\x02")]


def _img(v: int) -> Media:
    return Media.of(np.full((2, 2, 3), v, dtype=np.uint8))


def test_markers_become_framed_media_chunks() -> None:
    chunks = tokenize_prompt("ab<__media__>c", [_img(5)], FakeEncoder(), _tok, bos=0, eos=9)  # type: ignore[arg-type]
    assert isinstance(chunks[0], TextChunk) and chunks[0].tokens == [0, ord("a"), ord("b"), 1]
    assert isinstance(chunks[1], MediaChunk) and chunks[1].n_tokens == 3 and chunks[1].non_causal
    assert float(chunks[1].embd[0, 0]) == 5.0
    assert isinstance(chunks[2], TextChunk) and chunks[2].tokens == [2, ord("c"), 9]


def test_media_first_gets_a_bos_chunk_and_ids_follow_the_bytes() -> None:
    chunks = tokenize_prompt("<__media__><__media__>", [_img(1), _img(2)], FakeEncoder(), _tok, bos=0)  # type: ignore[arg-type]
    assert [type(c).__name__ for c in chunks] == ["TextChunk", "MediaChunk", "TextChunk", "MediaChunk", "TextChunk"]
    assert chunks[0].tokens == [0, 1] and chunks[2].tokens == [2, 1]  # type: ignore[union-attr]
    a, b = chunks[1], chunks[3]
    assert isinstance(a, MediaChunk) and isinstance(b, MediaChunk) and a.media_id != b.media_id
    assert _img(1).media_id == a.media_id  # the same bytes, the same id (the cache's key)


def test_marker_count_must_match() -> None:
    with pytest.raises(InvalidRequest, match=r"number of media markers in text \(0\) does not match number of bitmaps \(1\)"):
        split_markers("no marker", 1)
    assert split_markers("a<__media__>b", 1) == ["a", "b"]


def test_see_upto_opens_the_causal_mask() -> None:
    q = np.array([[3, 4, 5]])
    causal = attention_mask(q, 0, 6, None)
    full = attention_mask(q, 0, 6, None, see_upto=np.array([[5, 5, 5]]))
    assert np.isinf(causal[0, 0, 4]) and full[0, 0, 4] == 0 and np.all(full == 0)
    win = attention_mask(q, 0, 6, 2, see_upto=np.array([[5, 5, 5]]))
    assert np.isinf(win[0, 2, 3]) and win[0, 0, 5] == 0  # the window still bounds what lies behind


def test_non_causal_embedding_batches_plan_groups_that_see_the_whole_image() -> None:
    b = Batch.of_embeddings(np.zeros((300, 8), dtype=np.float32), start_pos=10, non_causal=True)
    groups = plan_attention(b)
    assert len(groups) == 3 and all(g.see_upto is not None and int(g.see_upto.max()) == 309 for g in groups)
    k_start, mask = groups[0].mask(None)
    assert k_start == 0 and mask.shape == (1, 128, 310) and np.all(mask == 0)
    assert plan_attention(Batch.single(list(range(300)), start_pos=10))[0].see_upto is None
    with pytest.raises(ValueError, match="one row per token"):
        Batch(np.zeros(3), np.zeros(3), np.arange(3), embd=np.zeros((2, 8)))


def test_flat_prompt_placeholders_and_snapping() -> None:
    chunks = tokenize_prompt("ab<__media__>c", [_img(5)], FakeEncoder(), _tok)  # type: ignore[arg-type]
    tokens, spans = flatten(chunks)
    ph = media_token(spans[0].media_id)
    assert ph < -1 and tokens == [ord("a"), ord("b"), 1, ph, ph, ph, 2, ord("c")]
    assert (spans[0].start, spans[0].end) == (3, 6)
    assert [snap_out_of_media(n, spans) for n in (2, 3, 4, 5, 6, 7)] == [2, 3, 3, 3, 6, 7]


def test_schedule_keeps_images_whole() -> None:
    atoms = ((3, 7),)  # the image is prompt tokens 3..6 from here
    assert schedule([SlotState(0, False, 10, atoms=atoms)], 5) == [Chunk(0, 3, False)]  # cut before it
    assert schedule([SlotState(0, False, 7, atoms=((0, 4),))], 5) == [Chunk(0, 5, False)]  # the image and one more
    assert schedule([SlotState(0, False, 7, atoms=((0, 6),)), SlotState(1, False, 9, order=1)], 8) == [
        Chunk(0, 6, False), Chunk(1, 2, False)]
    # the image does not fit what is left: the slot waits, the others take the budget
    assert schedule([SlotState(0, False, 9, atoms=((0, 9),)), SlotState(1, True)], 8) == [Chunk(1, 1, True)]


def test_batch_rows_of_an_image_carry_its_embeddings_and_see_its_end() -> None:
    embd = np.arange(12, dtype=np.float32).reshape(3, 4)
    span = MediaSpan(2, embd, "ab" * 8, True)
    prompt = [7, 8, -5, -5, -5, 9]
    plan = build_batch([Chunk(0, 4, False)], {0: SlotFeed(1, prompt, 1, media=(span,))}, 8)
    b = plan.batch
    assert b.tokens.tolist() == [8, -5, -5, -5] and b.positions.tolist() == [1, 2, 3, 4]
    assert b.embd is not None and np.array_equal(b.embd[1:], embd) and not b.embd[0].any()
    assert b.see_upto is not None and b.see_upto.tolist() == [1, 4, 4, 4]
    plain = build_batch([Chunk(0, 2, False)], {0: SlotFeed(0, [7, 8], 0)}, 8).batch
    assert plain.embd is None and plain.see_upto is None
