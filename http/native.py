"""llama-server's own API shapes (/completion, /tokenize, /infill, /embedding, /slots, /props),
as pure functions from request JSON to engine inputs and from engine results to JSON."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from llamacli.core.model.kernels.pooling import normalize
from llamacli.core.multimodal.limits import MediaLimits
from llamacli.core.multimodal.media_encoder import Encoders
from llamacli.core.multimodal.prompt import MediaSpan, prompt_with_media
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.tasks import Final, Partial, TaskParams
from llamacli.http.errors import bad_request, no_multimodal, not_supported
from llamacli.http.logprobs import probs_json, reported
from llamacli.http.media import b64_media
from llamacli.http.params import check_token_ids

# ---- prompts -----------------------------------------------------------------------------------


def _is_token(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_mixed(v: Any) -> bool:
    """One prompt given as a list: token ids, or token ids mixed with strings."""
    return isinstance(v, list) and all(_is_token(e) or isinstance(e, str) for e in v) and any(_is_token(e) for e in v)


def tokenize_mixed(tokenizer: Any, prompt: str | list[Any], n_vocab: int, add_special: bool = True) -> list[int]:
    """llama-server's tokenize_mixed: strings are tokenized with special tokens parsed; only a
    string in first position gets BOS (when the model adds one)."""
    if isinstance(prompt, str):
        return list(tokenizer.tokenize(prompt, add_special, True))
    out: list[int] = []
    for i, el in enumerate(prompt):
        if isinstance(el, str):
            out.extend(tokenizer.tokenize(el, add_special and i == 0, True))
        else:
            out.extend(check_token_ids([el], n_vocab))
    return out


def split_prompts(raw: Any) -> list[Any]:
    """The prompts of a /completion `prompt` field (one or many), not yet tokenized.

    One: "text", [12, 34], [12, "text", 56], {"prompt_string": ...}. Many: a list whose
    elements are each one of those (["a", "b"], ["a", [12, 34]], ...)."""
    if isinstance(raw, (str, dict)) or _is_mixed(raw):
        return [raw]
    if isinstance(raw, list):
        if not raw:
            raise bad_request("'prompt' is empty")
        for p in raw:
            if not (isinstance(p, (str, dict)) or _is_mixed(p)):
                raise bad_request(
                    "'prompt' must be a string, an array of token ids (optionally mixed with strings), "
                    "an object with prompt_string, or an array of those"
                )
        return list(raw)
    raise bad_request("'prompt' must be a string, an array of token ids, or an array of prompts")


def prompt_chars(prompt: Any) -> int:
    """Characters of text in one prompt (as split_prompts gives it), to bound before tokenizing."""
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, dict):
        text = prompt.get("prompt_string")
        return len(text) if isinstance(text, str) else 0
    if isinstance(prompt, list):
        return sum(len(e) for e in prompt if isinstance(e, str))
    return 0


NO_MULTIMODAL = "Multimodal data provided, but model does not support multimodal requests."


def media_prompt(
    tokenizer: Any, prompt: Any, n_vocab: int, encoders: Encoders | None, limits: MediaLimits
) -> tuple[list[int], tuple[MediaSpan, ...]]:
    """One prompt's tokens and media: a `{"prompt_string", "multimodal_data": [base64, ...]}`
    object's media (images or audio, by their magic) take its `<__media__>` markers in order
    (mtmd_tokenize); other prompts have no media. Without a projector, media is a 400 with
    llama-server's message."""
    data = prompt.get("multimodal_data") if isinstance(prompt, dict) else None
    if not data:
        return tokenize_prompt(tokenizer, prompt, n_vocab), ()
    if encoders is None:
        raise no_multimodal(NO_MULTIMODAL)
    if not isinstance(data, list) or not all(isinstance(d, str) for d in data):
        raise bad_request("'multimodal_data' must be an array of base64 strings")
    text = prompt.get("prompt_string")
    if not isinstance(text, str):
        raise bad_request("a prompt object needs 'prompt_string' (a string)")
    media = [b64_media(d, limits) for d in data]
    return prompt_with_media(text, media, encoders, tokenizer)


def tokenize_prompt(tokenizer: Any, prompt: Any, n_vocab: int, add_special: bool = True) -> list[int]:
    if isinstance(prompt, dict):
        if prompt.get("multimodal_data"):
            raise no_multimodal(NO_MULTIMODAL)
        text = prompt.get("prompt_string")
        if not isinstance(text, str):
            raise bad_request("a prompt object needs 'prompt_string' (a string)")
        prompt = text
    if _is_mixed(prompt):
        if all(_is_token(e) for e in prompt):
            return check_token_ids(prompt, n_vocab)
    return tokenize_mixed(tokenizer, prompt, n_vocab, add_special)


# ---- /completion -------------------------------------------------------------------------------


def stop_type(final: Final) -> str:
    return final.stop_type if final.stop_type in ("eos", "limit", "word") else "none"


def sampling_json(sp: SamplingParams) -> dict[str, Any]:
    names = (
        "temperature dynatemp_range dynatemp_exponent top_k top_p min_p top_n_sigma xtc_probability "
        "xtc_threshold typical_p repeat_last_n repeat_penalty presence_penalty frequency_penalty "
        "dry_multiplier dry_base dry_allowed_length dry_penalty_last_n mirostat mirostat_tau mirostat_eta"
    ).split()
    d: dict[str, Any] = {"seed": sp.seed}
    for n in names:
        d[n] = getattr(sp, n)
    d["dry_sequence_breakers"] = list(sp.dry_sequence_breakers)
    d["min_keep"] = sp.min_keep
    # llama-server's format_logit_bias: {"bias", "token"} objects; -inf is written as null
    d["logit_bias"] = [{"bias": b if math.isfinite(b) else None, "token": t} for t, b in sp.logit_bias]
    try:
        d["samplers"] = list(sp.sampler_names())
    except Exception:  # noqa: BLE001 - reported by validation elsewhere
        d["samplers"] = sp.samplers if isinstance(sp.samplers, str) else list(sp.samplers)
    return d


def params_json(p: TaskParams, stream: bool = False) -> dict[str, Any]:
    """llama-server's slot `params` / `generation_settings` object."""
    d: dict[str, Any] = {"n_predict": p.n_predict}
    d.update(sampling_json(p.sampling))
    d.update(
        {
            "stop": list(p.stop),
            "max_tokens": p.n_predict,
            "n_keep": p.n_keep,
            "n_discard": 0,
            "ignore_eos": p.ignore_eos,
            "stream": stream,
            "n_probs": p.n_probs,
            "post_sampling_probs": p.post_sampling_probs,
            "cache_prompt": p.cache_prompt,
            "id_slot": p.id_slot,
            "t_max_predict_ms": p.t_max_predict_ms,
            "speculative.n_max": p.speculative.n_max if p.speculative else 0,
            "speculative.n_min": p.speculative.n_min if p.speculative else 0,
            "speculative.p_min": p.speculative.p_min if p.speculative else 0.0,
            "timings_per_token": p.timings_per_token,
            "lora": [{"id": i, "scale": sc} for i, sc in enumerate(getattr(p, "lora", None) or ())],
        }
    )
    grammar = getattr(p, "grammar", None)
    d["grammar"] = grammar.source if grammar is not None else ""
    if grammar is not None:
        d["grammar_kind"] = grammar.kind
    return d


def completion_json(
    final: Final,
    parts: Sequence[Partial],
    *,
    index: int,
    model: str,
    tokenizer: Any,
    params: TaskParams,
    n_ctx: int,
    return_tokens: bool,
    stream: bool = False,
) -> dict[str, Any]:
    """The response of a finished /completion task (also the last chunk of a stream, whose
    content and tokens were already sent)."""
    settings = params_json(params, stream)
    settings.update({"n_ctx": n_ctx, "model": model})
    d: dict[str, Any] = {
        "index": index,
        "content": "" if stream else final.content,
        "tokens": [] if stream or not return_tokens else list(final.tokens),
        "id_slot": final.id_slot,
        "stop": True,
        "model": model,
        "tokens_predicted": len(final.tokens),
        "tokens_evaluated": len(final.prompt_tokens),
        "generation_settings": settings,
        "prompt": tokenizer.detokenize([t for t in final.prompt_tokens if t >= 0], False, True),  # media: no text
        "has_new_line": "\n" in final.content,
        "truncated": final.truncated,
        "stop_type": stop_type(final),
        "stopping_word": final.stopping_word,
        "tokens_cached": final.n_ctx_tokens,  # llama-server: the slot's tokens at the end (reuse: timings.cache_n)
        "timings": final.timings.to_dict(),
    }
    if params.n_probs > 0 and not stream:
        d["completion_probabilities"] = probs_json(tokenizer, reported(tokenizer, parts, final), params.post_sampling_probs)
    return d


def completion_chunk(part: Partial, *, index: int, id_slot: int, n_decoded: int, n_prompt: int,
                     tokenizer: Any, params: TaskParams) -> dict[str, Any]:
    """One streamed /completion step."""
    d: dict[str, Any] = {
        "index": index,
        "content": part.content,
        "tokens": list(part.tokens),
        "stop": False,
        "id_slot": id_slot,
        "tokens_predicted": n_decoded,
        "tokens_evaluated": n_prompt,
    }
    if part.timings is not None:
        d["timings"] = part.timings.to_dict()
    if part.progress is not None:
        d["prompt_progress"] = dict(part.progress)
    if params.n_probs > 0 and part.probs:
        d["completion_probabilities"] = probs_json(tokenizer, [part], params.post_sampling_probs)
    return d


def select_fields(d: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """`response_fields`: keep only these; "a/b" moves d["a"]["b"] to the top level as "b"."""
    out: dict[str, Any] = {}
    for f in fields:
        cur: Any = d
        for part in f.split("/"):
            if not isinstance(cur, dict) or part not in cur:
                cur = None
                break
            cur = cur[part]
        else:
            out[f.split("/")[-1]] = cur
    return out


# ---- /tokenize, /detokenize -------------------------------------------------------------------


def piece_json(tokenizer: Any, token: int) -> str | list[int]:
    """/tokenize with_pieces: the piece as text when it is valid UTF-8, else its bytes."""
    b = tokenizer.token_to_piece(int(token), True)
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return list(b)


def tokenize_json(tokenizer: Any, tokens: Sequence[int], with_pieces: bool) -> dict[str, Any]:
    if with_pieces:
        return {"tokens": [{"id": t, "piece": piece_json(tokenizer, t)} for t in tokens]}
    return {"tokens": list(tokens)}


# ---- /infill -----------------------------------------------------------------------------------


def format_infill(
    tokenizer: Any,
    prefix: str,
    suffix: str,
    extra: Sequence[dict[str, Any]],
    prompt: Sequence[int],
    n_batch: int,
    n_ctx: int,
    spm_infill: bool = False,
) -> list[int]:
    """llama-server's format_prompt_infill: [repo-level extra context] FIM_PRE prefix FIM_SUF
    suffix FIM_MID prompt (or SUF before PRE with spm_infill); prefix and suffix are cut to fit
    n_batch (3/4 prefix tail, 1/4 suffix head)."""
    v = tokenizer.vocab
    if v.fim_pre is None or v.fim_suf is None or v.fim_mid is None:
        raise not_supported(
            "this model has no fill-in-the-middle tokens (FIM_PRE/FIM_SUF/FIM_MID): /infill needs a code model"
        )

    def tok(s: str) -> list[int]:
        return list(tokenizer.tokenize(s, False, False))

    extra_tokens: list[int] = []
    if v.fim_rep is not None and v.fim_sep is not None:
        extra_tokens += [v.fim_rep] + tok("myproject\n")
        for chunk in extra:
            extra_tokens += [v.fim_sep] + tok(str(chunk.get("filename", "tmp"))) + tok("\n" + str(chunk.get("text", "")))
        extra_tokens += [v.fim_sep] + tok("filename\n")
    else:
        for chunk in extra:
            extra_tokens += tok(str(chunk.get("text", "")))
    pre = tok(prefix)
    suf = tok(suffix)
    n_extra_take = min(max(0, n_batch // 4), len(extra_tokens))
    n_suffix_take = min(len(suf), max(0, n_batch // 4))
    n_prefix_take = min(len(pre), 3 * (n_batch // 4) - 3)
    pre = [v.fim_pre] + pre[len(pre) - max(0, n_prefix_take):]
    suf = [v.fim_suf] + suf[:n_suffix_take]
    inp = suf + pre if spm_infill else pre + suf
    mid = [v.fim_mid] + list(prompt)
    head = extra_tokens[len(extra_tokens) - n_extra_take:]
    if v.add_bos and v.bos is not None:
        head = [v.bos] + head
    return head + inp + mid


# ---- embeddings --------------------------------------------------------------------------------


def embedding_rows(final: Final, pooling: str, norm: int) -> np.ndarray:
    """(rows, n_embd): the pooled vector (one row, normalized) or, for pooling none, every
    token's hidden state unnormalized (as llama-server)."""
    emb = np.asarray(final.embedding, dtype=np.float32)
    if emb.ndim == 1:
        emb = emb[None, :]
    if pooling == "none":
        return emb
    return normalize(emb, norm)


def native_embedding_json(index: int, rows: np.ndarray) -> dict[str, Any]:
    return {"index": index, "embedding": rows.tolist()}


# ---- /slots, /props ----------------------------------------------------------------------------


def slot_json(slot: Any, n_ctx: int, defaults: TaskParams) -> dict[str, Any]:
    """One slot of GET /slots. As llama-server, `id_task`, `params` and `next_token` are there
    once the slot has served a task (the current one, else the one before).

    Read from the HTTP side while the engine thread runs its step (GET /slots must not wait for a
    step that may take seconds): each slot attribute is read once (a reference or a length, both
    atomic under the GIL), so the answer is a snapshot that may mix the states just before and
    after a step, never a half-updated object."""
    task = slot.task
    out: dict[str, Any] = {"id": slot.id, "n_ctx": n_ctx, "speculative": defaults.speculative is not None,
                           "is_processing": task is not None}
    shown = task if task is not None else getattr(slot, "last_task", None)
    if shown is None:
        return out
    params = shown.params
    n_decoded = len(slot.generated)
    n_remain = -1 if params.n_predict < 0 or task is None else max(0, params.n_predict - n_decoded)
    stop = slot.stop
    text = stop.text if stop is not None else ""
    out |= {
        "id_task": shown.id,
        "params": params_json(params),
        "n_prompt_tokens": len(shown.prompt_tokens),
        "n_cached_tokens": len(slot.cached),
        "next_token": [  # a list, as llama-server writes it
            {
                "has_next_token": task is not None,
                "has_new_line": "\n" in text,
                "n_remain": n_remain,
                "n_decoded": n_decoded,
                "stopping_word": stop.stopped_word if stop is not None else "",
            }
        ],
    }
    return out
