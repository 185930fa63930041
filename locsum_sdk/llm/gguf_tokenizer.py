"""The tokenizer a GGUF file describes in its metadata, as a `tokenizers.Tokenizer`: a byte-level BPE (`gpt2`) with
its vocabulary, merges and control tokens, split before BPE by the pattern its pre-tokenizer name stands for in
llama.cpp; or a SentencePiece BPE (`llama`: Llama 2's, Mistral 7B's) with its pieces and their scores, in the form
transformers converts such a tokenizer to (`sentencepiece`). Other tokenizer models and unknown pre-tokenizers are
refused by name."""

from __future__ import annotations

import math
from typing import Any

from ..errors import BundleError
from ..words import SENTENCEPIECE_MARKER as _MARKER

_UNKNOWN, _CONTROL, _USER_DEFINED, _BYTE = 2, 3, 4, 6  # llama.cpp's token types: <unk>, special, added, <0xNN>

_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
#: llama.cpp's pre-tokenizer names -> (split pattern before GPT-2's byte-level one, or None; digits one by one; NFC),
#: the names llama.cpp reads alike read alike (Falcon 3's as Llama 3's, DeepSeek-R1's Qwen distillations' as Qwen2's)
PRE_TOKENIZERS = {
    "smollm": (None, True, False),
    "gpt-2": (None, False, False),
    "default": (None, False, False),
    **dict.fromkeys(("llama-bpe", "llama3", "llama-v3", "falcon3"), (_LLAMA3, False, False)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen"), (_QWEN2, False, True)),
}


def split_as(tokenizer, pre: str) -> None:
    """Give a byte-level BPE `tokenizer` the normalizer, pre-tokenizer and decoder llama.cpp's `pre` names."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers

    pattern, digits, nfc = PRE_TOKENIZERS[pre]
    steps = [pre_tokenizers.Digits(individual_digits=True)] if digits else []
    if pattern is not None:
        steps.append(pre_tokenizers.Split(Regex(pattern), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pattern is None))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(steps)
    if nfc:
        tokenizer.normalizer = normalizers.NFC()
    tokenizer.decoder = decoders.ByteLevel()


def gguf_tokenizer(metadata: dict[str, Any], where: str):
    """The tokenizer of a GGUF file's metadata (BundleError naming what is not read)."""
    from tokenizers import Tokenizer, models

    model = metadata.get("tokenizer.ggml.model")
    if model == "llama":
        return sentencepiece(metadata, where)
    if model != "gpt2":
        raise BundleError(f"{where}: its tokenizer is {model!r}; byte-level BPE (gpt2) and SentencePiece BPE (llama) "
                          "tokenizers are read from GGUF files (export the model from its HF directory, which holds "
                          "tokenizer.json)")
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if not isinstance(pre, str) or pre not in PRE_TOKENIZERS:
        raise BundleError(f"{where}: pre-tokenizer {pre!r} is not read here ({sorted(PRE_TOKENIZERS)} are); export "
                          "from the model's HF directory, which holds tokenizer.json")
    tokens, merges = metadata.get("tokenizer.ggml.tokens"), metadata.get("tokenizer.ggml.merges")
    types = metadata.get("tokenizer.ggml.token_type", [1] * len(tokens) if isinstance(tokens, list) else None)
    if not (isinstance(tokens, list) and tokens and all(isinstance(token, str) for token in tokens)
            and isinstance(merges, list) and all(isinstance(merge, str) and " " in merge for merge in merges)
            and isinstance(types, list) and len(types) == len(tokens) and all(isinstance(t, int) for t in types)):
        raise BundleError(f"{where}: its byte-level BPE tokenizer needs a list of tokens, a type for each and a list "
                          "of merges (two pieces with a space between)")
    merges = [tuple(merge.split(" ", 1)) for merge in merges]
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges,
                                     fuse_unk=False, byte_fallback=False))
    split_as(tokenizer, pre)
    return _with_added(tokenizer, tokens, types, special=(_CONTROL,))


def _with_added(tokenizer, tokens: list[str], types: list[int], special: tuple[int, ...]):
    """`tokenizer` with the file's tokens of the `special` types as special tokens and its user-defined ones added,
    each matched as it is written."""
    from tokenizers import AddedToken

    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token, kind in zip(tokens, types) if kind in special])
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False)
                          for token, kind in zip(tokens, types) if kind == _USER_DEFINED])
    return tokenizer


def sentencepiece(metadata: dict[str, Any], where: str):
    """A SentencePiece BPE tokenizer from a GGUF file's pieces, scores and token types, as llama.cpp reads one: the
    text's spaces as "\u2581", one put before it (unless `tokenizer.ggml.add_space_prefix` is false; after each
    special token too, as llama.cpp and transformers' converted Llama tokenizers do); pieces merged, highest score
    first, wherever two neighbours make a piece; characters no piece holds as their UTF-8 bytes' pieces ("<0x41>")."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    tokens, scores, types = (metadata.get(f"tokenizer.ggml.{key}") for key in ("tokens", "scores", "token_type"))
    if not (all(isinstance(field, (list, tuple)) for field in (tokens, scores, types))
            and all(isinstance(token, str) and token for token in tokens)
            and all(isinstance(score, (int, float)) and math.isfinite(score) for score in scores)
            and all(isinstance(kind, int) for kind in types)):
        raise BundleError(f"{where}: its SentencePiece tokenizer's pieces, scores and types are not lists of non-empty "
                          "strings, finite numbers and whole numbers")
    if not tokens or len(scores) != len(tokens) or len(types) != len(tokens) or len(set(tokens)) != len(tokens):
        raise BundleError(f"{where}: its SentencePiece tokenizer needs one score and one type for each of its distinct "
                          f"pieces ({len(tokens)} pieces, {len(set(tokens))} distinct, {len(scores)} scores, "
                          f"{len(types)} types)")
    if metadata.get("tokenizer.ggml.remove_extra_whitespaces"):
        raise BundleError(f"{where}: its SentencePiece tokenizer removes extra whitespace, which is not read here; "
                          "export the model from its HF directory, which holds tokenizer.json")
    unknown = next((token for token, kind in zip(tokens, types) if kind == _UNKNOWN), None)
    vocab = {token: i for i, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=sentencepiece_merges(tokens, scores, types),
                                     unk_token=unknown, fuse_unk=True, byte_fallback=_BYTE in types))
    prefix = bool(metadata.get("tokenizer.ggml.add_space_prefix", True))
    tokenizer.normalizer = normalizers.Sequence([*([normalizers.Prepend(_MARKER)] if prefix else []),
                                                 normalizers.Replace(" ", _MARKER)])
    tokenizer.decoder = decoders.Sequence([decoders.Replace(_MARKER, " "), decoders.ByteFallback(), decoders.Fuse(),
                                           *([decoders.Strip(" ", 1, 0)] if prefix else [])])
    return _with_added(tokenizer, tokens, types, special=(_UNKNOWN, _CONTROL))


def sentencepiece_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """Every pair of pieces whose join is a piece, the join's score highest first (then its id, then the left
    piece's length): SentencePiece's BPE as merges, one pass over each piece's split points."""
    mergeable = {token for token, kind in zip(tokens, types) if kind not in (_UNKNOWN, _CONTROL, _BYTE)}
    found = []
    for i, (token, score, kind) in enumerate(zip(tokens, scores, types)):
        if kind in (_UNKNOWN, _CONTROL, _BYTE, _USER_DEFINED):
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in mergeable and right in mergeable:
                found.append((-float(score), i, -cut, left, right))
    return [(left, right) for *_, left, right in sorted(found)]
