"""A prompt with media markers as chunks of text tokens and media embeddings (mtmd.cpp's
`mtmd_tokenize`), and their evaluation into a sequence of the KV cache
(`mtmd_helper_eval_chunks`).

Each `<__media__>` marker takes the next medium, framed by its family's text (gemma3:
`<start_of_image>` ... `<end_of_image>`; qwen2a: `<|audio_bos|>` ... `<|audio_eos|>`), with one
media chunk per piece the encoder gives (an image: one, or idefics3's slices and overview with
tokens between them; audio: one per 30 s window). Text
around the markers is tokenized piece by piece with special tokens parsed; BOS (when the vocabulary adds one) opens the first chunk and EOS
closes the last, as mtmd adds them.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.multimodal.encoder import MEDIA_MARKER
from llamacli.core.multimodal.media import Media
from llamacli.core.multimodal.media_encoder import Encoders, TokenPieces
from llamacli.core.multimodal.mrope import mrope_positions
from llamacli.core.text.tokenizer import Tokenizer


@dataclass(frozen=True)
class TextChunk:
    tokens: list[int]

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class MediaChunk:
    """A medium's (or an audio window's) embeddings (n, n_embd), its id (the hash of its bytes:
    the prompt cache's key for these positions) and whether the text model attends to it non-causally."""

    embd: np.ndarray
    media_id: str
    non_causal: bool
    grid: tuple[int, int] | None = None  # (nx, ny) merge units: the image's M-RoPE layout (core/multimodal/mrope.py)

    @property
    def n_tokens(self) -> int:
        return int(self.embd.shape[0])


PromptChunk = TextChunk | MediaChunk


@dataclass(frozen=True)
class MediaSpan:
    """A media chunk placed in a flat prompt: its tokens are prompt[start:end], all equal to
    `media_token(media_id)`."""

    start: int
    embd: np.ndarray  # (n, n_embd)
    media_id: str
    non_causal: bool
    grid: tuple[int, int] | None = None  # (nx, ny): M-RoPE layout of an image

    @property
    def end(self) -> int:
        return self.start + int(self.embd.shape[0])


def media_token(media_id: str) -> int:
    """The placeholder id of a media's positions in a flat prompt: negative (never a vocabulary
    id, never -1) and a function of the media's hash, so that comparing two prompts' tokens
    compares their media too (the prompt cache reuses an image only when its bytes are the same)."""
    return -2 - int(media_id[:12], 16)


def flatten(chunks: Sequence[PromptChunk]) -> tuple[list[int], tuple[MediaSpan, ...]]:
    """The chunks as one token list (media positions as placeholders) and the media spans."""
    tokens: list[int] = []
    spans: list[MediaSpan] = []
    for ch in chunks:
        if isinstance(ch, TextChunk):
            tokens.extend(ch.tokens)
        else:
            spans.append(MediaSpan(len(tokens), ch.embd, ch.media_id, ch.non_causal, ch.grid))
            tokens.extend([media_token(ch.media_id)] * ch.n_tokens)
    return tokens, tuple(spans)


def snap_out_of_media(n: int, spans: Sequence[MediaSpan]) -> int:
    """n, or the start of the media span n falls strictly inside (a prompt is never cut in
    the middle of an image: a cached prefix, a batch boundary)."""
    for sp in spans:
        if sp.start < n < sp.end:
            return sp.start
    return n


def chunk_id(media_id: str, i: int) -> str:
    """The id of a medium's i-th chunk: the medium's own for the first, a hash of both after
    (two clips that share their first 30 s differ from the second window's placeholders on)."""
    return media_id if i == 0 else hashlib.sha256(f"{media_id}/{i}".encode()).hexdigest()[:32]


def split_markers(prompt: str, n_media: int, marker: str = MEDIA_MARKER) -> list[str]:
    """The text between markers (n_media + 1 pieces); InvalidRequest (mtmd's message) when the
    counts differ."""
    parts = prompt.split(marker)
    if len(parts) - 1 != n_media:
        raise InvalidRequest(f"number of media markers in text ({len(parts) - 1}) does not match number of bitmaps ({n_media})")
    return parts


Tokenize = Callable[[str], list[int]]  # text -> ids, no BOS/EOS, special tokens parsed
Lookup = Callable[[str], int]  # a token's piece -> its id (mtmd's lookup_token)


def piece_lookup(tokenizer: Tokenizer) -> Lookup:
    """mtmd.cpp's lookup_token over the tokenizer's vocabulary: the first id whose piece (special
    tokens rendered) is the text; a piece the vocabulary lacks is an InvalidRequest (mtmd would
    put LLAMA_TOKEN_NULL in the prompt and fail to decode it)."""
    index = _piece_index(tokenizer)

    def lookup(text: str) -> int:
        tid = index.get(text.encode())
        if tid is None:
            raise InvalidRequest(f"the text model's vocabulary has no token {text!r}, which the projector's image layout needs")
        return tid

    return lookup


@functools.lru_cache(maxsize=4)
def _piece_index(tokenizer: Tokenizer) -> dict[bytes, int]:
    """piece -> first id, built once per tokenizer (a walk over the whole vocabulary)."""
    index: dict[bytes, int] = {}
    for i in range(tokenizer.n_vocab):
        index.setdefault(tokenizer.token_to_piece(i, special=True), i)
    return index


def tokenize_prompt(
    prompt: str,
    media: Sequence[Media],
    encoder: Encoders,
    tokenize: Tokenize,
    bos: int | None = None,
    eos: int | None = None,
    lookup: Lookup | None = None,
) -> list[PromptChunk]:
    """The prompt as chunks; each medium goes to the encoder of its kind (InvalidRequest with
    llama-server's message when the projector has none), whose cache may answer, laid out as
    its encoder says (`lookup` names the tokens a layout gives by their pieces)."""
    chunks: list[PromptChunk] = []

    def add_text(ids: list[int]) -> None:
        if not ids:
            return
        if chunks and isinstance(chunks[-1], TextChunk):
            chunks[-1].tokens.extend(ids)
        else:
            chunks.append(TextChunk(list(ids)))

    parts = split_markers(prompt, len(media))
    encoders = [encoder.encoder_for(m) for m in media]  # refuses a kind the projector lacks first
    for i, text in enumerate(parts):
        add_text(tokenize(text) if text else [])
        if i < len(media):
            enc, m = encoders[i], media[i]
            embds = enc.encode_cached(m)
            for item in enc.layout(m, len(embds)):
                if isinstance(item, int):
                    chunks.append(MediaChunk(embds[item], chunk_id(m.media_id, item), enc.framing.non_causal, enc.grid(m)))
                elif isinstance(item, TokenPieces):
                    if lookup is None:
                        raise ValueError("this projector's layout needs a token lookup")
                    add_text([lookup(p) for p in item.pieces])
                elif item:
                    add_text(tokenize(item))
    if bos is not None:
        if chunks and isinstance(chunks[0], TextChunk):
            chunks[0].tokens.insert(0, bos)
        else:
            chunks.insert(0, TextChunk([bos]))
    if eos is not None:
        add_text([eos])
    return chunks


def prompt_with_media(
    prompt: str, media: Sequence[Media], encoder: Encoders, tokenizer: Tokenizer, add_special: bool = True
) -> tuple[list[int], tuple[MediaSpan, ...]]:
    """A driver's prompt with `<__media__>` markers as an engine task's tokens and media spans
    (special tokens parsed, BOS/EOS as the vocabulary adds them, as mtmd_tokenize)."""
    v = tokenizer.vocab
    chunks = tokenize_prompt(
        prompt, media, encoder, lambda t: tokenizer.tokenize(t, add_special=False, parse_special=True),
        bos=v.bos if add_special and v.add_bos else None, eos=v.eos if add_special and v.add_eos else None,
        lookup=piece_lookup(tokenizer),
    )
    return flatten(chunks)


def eval_chunks(
    model: DecoderModel, cache: KVCache, chunks: Sequence[PromptChunk], n_batch: int, seq: int = 0, n_past: int = 0
) -> np.ndarray:
    """Run the chunks into sequence `seq` from position n_past, text in batches of n_batch and
    each image in one batch (non-causal where its family says); the last position's logits.
    An M-RoPE model (qwen2vl) gets each batch's rope positions (core/multimodal/mrope.py)."""
    _, spans = flatten(chunks)
    spans = tuple(replace(sp, start=sp.start + n_past) for sp in spans)
    logits = np.zeros(0, dtype=np.float32)
    pos = n_past

    def run(b: Batch) -> np.ndarray:
        if model.mrope:
            b.rope_pos = mrope_positions(b.positions, spans)
        return model.forward(b, cache)[-1]

    for ch in chunks:
        if isinstance(ch, TextChunk):
            for a in range(0, ch.n_tokens, n_batch):
                part = ch.tokens[a : a + n_batch]
                logits = run(Batch.single(part, start_pos=pos, seq_id=seq))
                pos += len(part)
        else:
            if ch.non_causal and ch.n_tokens > n_batch:
                raise InvalidRequest(f"the image needs {ch.n_tokens} tokens in one batch: n_batch is {n_batch}")
            for a in range(0, ch.n_tokens, n_batch):
                e = ch.embd[a : a + n_batch]
                logits = run(Batch.of_embeddings(e, pos, seq, ch.non_causal))
                pos += e.shape[0]
    return logits
