"""Tokenizers exact to llama.cpp: SPM, BPE (with its pre-tokenizers) and WPM.

    tok = load_tokenizer(read_metadata(path))
    ids = tok.tokenize("Hello", add_special=True, parse_special=False)
    text = tok.detokenize(ids)
"""

from llamacli.core.text.tokenizer.decoder import IncrementalDecoder
from llamacli.core.text.tokenizer.tokenizer import Tokenizer, load_tokenizer
from llamacli.core.text.tokenizer.vocab import Vocab

__all__ = ["IncrementalDecoder", "Tokenizer", "Vocab", "load_tokenizer"]
