"""The token sequence a reranker scores for (query, document), as llama-server builds it
(server-common.cpp format_prompt_rerank).

With a `tokenizer.chat_template.rerank` in the GGUF: the template with `{query}` and
`{document}` replaced, tokenized without added specials but with special-token text parsed.
Otherwise: [BOS] query [EOS] [SEP] document [EOS], each bracketed token only where the
vocabulary adds it (add_bos / add_eos / add_sep; EOS falls back to SEP when the vocabulary
has none); query and document are tokenized as plain text (no specials added or parsed).
A BERT vocabulary (add_bos, add_sep) thus gives [CLS] query [SEP] document.
"""

from __future__ import annotations

from typing import Any

from llamacli.core.text.tokenizer import Tokenizer

RERANK_TEMPLATE_KEY = "tokenizer.chat_template.rerank"


def rerank_template(metadata: dict[str, Any]) -> str | None:
    """The GGUF's rerank prompt template, if it has one."""
    t = metadata.get(RERANK_TEMPLATE_KEY)
    return t if isinstance(t, str) else None


def rerank_tokens(tokenizer: Tokenizer, query: str, document: str, template: str | None = None) -> list[int]:
    """The tokens whose score (rank pooling) says how well `document` answers `query`."""
    if template is not None:
        prompt = template.replace("{query}", query).replace("{document}", document)
        return tokenizer.tokenize(prompt, False, True)
    v = tokenizer.vocab
    eos = v.eos if v.eos is not None else v.sep
    out: list[int] = []
    if v.add_bos and v.bos is not None:
        out.append(v.bos)
    out += tokenizer.tokenize(query, False, False)
    if v.add_eos and eos is not None:
        out.append(eos)
    if v.add_sep and v.sep is not None:
        out.append(v.sep)
    out += tokenizer.tokenize(document, False, False)
    if v.add_eos and eos is not None:
        out.append(eos)
    return out
