"""The unified batch of one engine step, as a pure function (no model, no threads).

`scheduler.schedule` decides how many tokens each slot feeds; `build_batch` lays them out:
the batch's tokens, sequences, positions and output flags, and for each slot which rows are
its own, in the batch and in the forward's outputs (hidden states, then logits), so that the
engine never has to search the batch for them again.

Output rows, as llama-server asks llama_decode for them:
- decode chunk (the sampled token + k draft tokens): every row (1 + k logits: one to sample,
  k to verify the draft);
- prompt chunk of a completion: only the prompt's last token, once it is in the chunk (its
  logits give the first generated token); earlier chunks have no output at all;
- prompt chunk of an embedding task: every row (the hidden states are pooled), no logits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from llamacli.core.model.state.batch import Batch
from llamacli.core.multimodal.mrope import mrope_positions
from llamacli.core.multimodal.prompt import MediaSpan
from llamacli.core.runtime.scheduler import Chunk


@dataclass(frozen=True)
class SlotFeed:
    """What `build_batch` reads of a scheduled slot."""

    n_cells: int  # tokens in the slot's KV sequence: the position of the first token fed now
    prompt: Sequence[int] = ()  # prefill: the task's prompt
    n_past: int = 0  # prefill: prompt tokens already in the cache
    next_token: int = -1  # decode: the token sampled at the previous step
    draft: Sequence[int] = ()  # decode: speculative tokens to verify after it
    embedding: bool = False  # an embedding task: every token's hidden state is an output
    media: Sequence[MediaSpan] = ()  # prefill: the prompt's media (rows fed as embeddings)


@dataclass(frozen=True)
class SlotRows:
    """One slot's share of the batch and of the forward's outputs."""

    slot_id: int
    decode: bool  # a generation step (next token + draft) rather than a prompt chunk
    tokens: tuple[int, ...]  # the tokens fed (they join the slot's cached tokens)
    first: int  # batch row of tokens[0]
    hidden: slice  # its rows of the forward's output (hidden states); empty when none
    logits: slice  # its rows of the logits computed for sampling; empty when none
    prompt_done: bool = False  # a prompt chunk that ends the prompt


@dataclass
class BatchPlan:
    batch: Batch
    rows: list[SlotRows]  # in batch order (the scheduler's: decode chunks first)
    logit_rows: np.ndarray  # int (n_logits,): the output rows whose logits are computed, in `rows` order

    @property
    def n_positions(self) -> int:
        """One past the largest position in the batch (the `n_tokens_max` metric)."""
        return int(self.batch.positions.max()) + 1


def chunk_tokens(ch: Chunk, feed: SlotFeed) -> list[int]:
    """The tokens a chunk feeds: the sampled token and the draft's first n - 1 tokens, or the
    next n prompt tokens."""
    if ch.decode:
        if ch.n_tokens > 1 + len(feed.draft):
            raise ValueError(f"slot {ch.slot_id}: {ch.n_tokens} decode tokens, but a draft of {len(feed.draft)}")
        return [feed.next_token, *feed.draft[: ch.n_tokens - 1]]
    if feed.n_past + ch.n_tokens > len(feed.prompt):
        raise ValueError(f"slot {ch.slot_id}: a chunk of {ch.n_tokens} runs past the prompt")
    return list(feed.prompt[feed.n_past : feed.n_past + ch.n_tokens])


def build_batch(chunks: Sequence[Chunk], feeds: Mapping[int, SlotFeed], n_batch: int) -> BatchPlan:
    """The batch of one forward pass (at most n_batch tokens) and where each slot's rows are."""
    if not chunks:
        raise ValueError("an empty batch")
    tokens: list[int] = []
    seq_ids: list[int] = []
    positions: list[int] = []
    output: list[bool] = []
    logit_rows: list[int] = []
    media_rows: list[tuple[int, np.ndarray, int]] = []  # (batch row, embedding, last key position)
    rope_rows: list[np.ndarray] = []  # each slot's (n, 4) M-RoPE positions
    # an image with an M-RoPE grid anywhere in a slot's prompt: every row gets its (t, h, w, e)
    mrope = any(sp.grid is not None for ch in chunks for sp in feeds[ch.slot_id].media)
    rows: list[SlotRows] = []
    n_out = 0  # output rows so far: the next slot's first hidden row
    for ch in chunks:
        if ch.n_tokens < 1:
            raise ValueError(f"slot {ch.slot_id}: an empty chunk")
        feed = feeds[ch.slot_id]
        new = chunk_tokens(ch, feed)
        n = len(new)
        prompt_done = not ch.decode and feed.n_past + n == len(feed.prompt)
        if ch.decode or feed.embedding:
            out = [True] * n
        else:  # a completion's prompt: only its last token's logits are wanted
            out = [False] * (n - 1) + [prompt_done]
        n_here = sum(out)
        hidden = slice(n_out, n_out + n_here)
        samples = not feed.embedding and n_here > 0  # decode, or the prompt's last token
        logits = slice(len(logit_rows), len(logit_rows) + (n_here if samples else 0))
        if samples:
            logit_rows.extend(range(hidden.start, hidden.stop))
        if not ch.decode and feed.media:
            media_rows.extend(_media_rows(feed, n, len(tokens)))
        rows.append(SlotRows(ch.slot_id, ch.decode, tuple(new), len(tokens), hidden, logits, prompt_done))
        tokens.extend(new)
        seq_ids.extend([ch.slot_id] * n)
        positions.extend(range(feed.n_cells, feed.n_cells + n))
        if mrope:
            rope_rows.append(mrope_positions(np.arange(feed.n_cells, feed.n_cells + n), feed.media))
        output.extend(out)
        n_out += n_here
    if len(tokens) > n_batch:
        raise ValueError(f"{len(tokens)} tokens in a batch of at most {n_batch}")
    decode = [r.decode for r in rows for _ in r.tokens]
    embd, see_upto = _media_inputs(media_rows, positions)
    batch = Batch(np.array(tokens), np.array(seq_ids), np.array(positions), np.array(output), np.array(decode), embd, see_upto,
                  np.concatenate(rope_rows) if mrope else None)
    return BatchPlan(batch, rows, np.array(logit_rows, dtype=np.int64))


def _media_rows(feed: SlotFeed, n: int, first_row: int) -> list[tuple[int, np.ndarray, int]]:
    """The media rows of a prompt chunk of n tokens placed at batch row first_row: (row, its
    embedding, the last key position it sees: the end of its image when non-causal)."""
    a, b = feed.n_past, feed.n_past + n
    out: list[tuple[int, np.ndarray, int]] = []
    for sp in feed.media:
        lo, hi = max(a, sp.start), min(b, sp.end)
        for j in range(lo, hi):  # prompt index j sits at position n_cells + (j - n_past)
            last = sp.end - 1 if sp.non_causal else j
            out.append((first_row + j - a, sp.embd[j - sp.start], feed.n_cells + last - a))
    return out


def _media_inputs(media_rows: list[tuple[int, np.ndarray, int]], positions: list[int]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Batch.embd (T, n_embd) and see_upto (T,) for the media rows (None, None without any)."""
    if not media_rows:
        return None, None
    embd = np.zeros((len(positions), media_rows[0][1].shape[0]), dtype=np.float32)
    see_upto = np.array(positions, dtype=np.int64)
    for row, e, last in media_rows:
        embd[row] = e
        see_upto[row] = last
    return embd, see_upto
