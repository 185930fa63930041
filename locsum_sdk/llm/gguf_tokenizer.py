"""The tokenizer a GGUF file describes in its metadata, as a `tokenizers.Tokenizer`: a byte-level BPE (`gpt2`) with
its vocabulary, merges and control tokens, split before BPE by the pattern its pre-tokenizer name stands for in
llama.cpp. SentencePiece files (`llama`) and unknown pre-tokenizers are refused by name."""

from __future__ import annotations

from typing import Any

from ..errors import BundleError

_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp's token types of special and added tokens

_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
#: llama.cpp's pre-tokenizer names -> (split pattern before GPT-2's byte-level one, or None; digits one by one; NFC)
PRE_TOKENIZERS = {
    "smollm": (None, True, False),
    "gpt-2": (None, False, False),
    "default": (None, False, False),
    "llama-bpe": (_LLAMA3, False, False),
    "llama3": (_LLAMA3, False, False),
    "qwen2": (_QWEN2, False, True),
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
    from tokenizers import AddedToken, Tokenizer, models

    model = metadata.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise BundleError(f"{where}: its tokenizer is {model!r}; byte-level BPE (gpt2) tokenizers are read from GGUF "
                          "files (export a SentencePiece model from its HF directory, which holds tokenizer.json)")
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise BundleError(f"{where}: pre-tokenizer {pre!r} is not read here ({sorted(PRE_TOKENIZERS)} are); export "
                          "from the model's HF directory, which holds tokenizer.json")
    tokens = list(metadata["tokenizer.ggml.tokens"])
    merges = [tuple(merge.split(" ", 1)) for merge in metadata["tokenizer.ggml.merges"]]
    types = list(metadata.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    tokenizer = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(tokens)}, merges=merges,
                                     fuse_unk=False, byte_fallback=False))
    split_as(tokenizer, pre)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token, kind in zip(tokens, types) if kind == _CONTROL])
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False)
                          for token, kind in zip(tokens, types) if kind == _USER_DEFINED])
    return tokenizer
