"""Reading a tokenizer.json for paging and generation.

Every text a tokenizer read here encodes (a unit, a query, a document title) has its special tokens' strings
encoded as plain text (`encode_special_tokens`): an input holding `<|im_end|>` or `</s>` gets the pieces of those
characters, never the ids that open or close a turn of the model's prompt. Only the bundle's frame
(`units.SpecialTokens`) places special tokens, by id.

A tokenizer file may carry its own padding and truncation: sentence-transformers' files (all-MiniLM-L6-v2's among
them) pad every text to 128 tokens and cut it there. Paging sets every length itself, so both are turned off: with
them, every snippet would be read as 128 ids, most of them [PAD], and a longer one silently cut.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("locsum_sdk")


def read_tokenizer(path: str | os.PathLike):
    """The `tokenizers.Tokenizer` in `path`, special tokens' strings encoded as text, its own padding and truncation
    turned off."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.encode_special_tokens = True
    if tokenizer.padding is not None or tokenizer.truncation is not None:
        logger.info("%s: its own padding %s and truncation %s are off; paging sets the lengths", path,
                    tokenizer.padding, tokenizer.truncation)
        tokenizer.no_padding()
        tokenizer.no_truncation()
    return tokenizer
