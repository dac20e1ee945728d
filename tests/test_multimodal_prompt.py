"""Prompt chunks with media (core/multimodal/prompt.py) and the non-causal attention of image
chunks (Batch.non_causal, ops.attention_mask's see_upto), without a model."""

from __future__ import annotations


import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import plan_attention
from llamacli.core.model.kernels.ops import attention_mask
from llamacli.core.model.state.batch import Batch
from llamacli.core.multimodal.encoder import ImageFraming
from llamacli.core.multimodal.prompt import Media, MediaChunk, TextChunk, split_markers, tokenize_prompt


class FakeEncoder:
    framing = ImageFraming("<soi>", "<eoi>", True)

    def encode(self, rgb: np.ndarray) -> np.ndarray:
        return np.full((3, 4), float(rgb[0, 0, 0]), dtype=np.float32)


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
