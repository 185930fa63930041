"""Converter for the Hierarchical Transformer's research checkpoints (nlpyang/hiersumm): `{'model': state_dict,
'opt': argparse.Namespace, 'optim': ...}` saved by `torch.save`.

Read with `torch.load(weights_only=True)`, argparse.Namespace the one class allowed beyond tensors and containers
(nothing else is unpickled). Legacy LayerNorm names (`a_2`, `b_2`) become `weight`, `bias`; positional-code and
causal-mask buffers are dropped; the research code never shipped its ranker, so ours starts untrained.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch

from ..configs.hiersumm import KIND, HierSummConfig
from ..errors import BundleError
from .weights import load_failure

ATTENTION = {"linear_keys": "k_proj", "linear_values": "v_proj", "linear_query": "q_proj", "final_linear": "out_proj"}
FEED_FORWARD = {"w_1": "w1", "w_2": "w2", "layer_norm": "norm"}
LOCAL = {"layer_norm": "norm", **{f"self_attn.{k}": f"attention.{v}" for k, v in ATTENTION.items()}}
GLOBAL = {"layer_norm1": "norm", "layer_norm2": "head_norm", "pooling.linear_keys": "pooling.scores",
          "pooling.linear_values": "pooling.values", "linear": "linear",
          **{f"inter_att.{k}": v for k, v in ATTENTION.items() if k != "final_linear"}}
DECODER = {"layer_norm_1": "self_norm", "layer_norm_2": "cross_norm",
           **{f"self_attn.{k}": f"self_attn.{v}" for k, v in ATTENTION.items()},
           **{f"context_attn.{k}": f"cross_attn.{v}" for k, v in ATTENTION.items()}}
DROPPED = re.compile(r"(^|\.)(pos_emb\.pe|mask)$")


def read_research(path: Path) -> tuple[dict[str, torch.Tensor], argparse.Namespace]:
    """The state dict and options of a research checkpoint file, unpickling nothing but tensors, containers and
    argparse.Namespace."""
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises its own types for damaged files and refused classes
        raise BundleError(f"{path} cannot be read as a hiersumm research checkpoint ({load_failure(err)})") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict) or \
            not isinstance(checkpoint.get("opt"), argparse.Namespace):
        raise BundleError(f"{path} is not a hiersumm research checkpoint ({{'model': ..., 'opt': ...}})")
    state = {}
    for name, tensor in checkpoint["model"].items():
        name = re.sub(r"\.a_2$", ".weight", re.sub(r"\.b_2$", ".bias", name))
        state[name] = tensor
    return state, checkpoint["opt"]


def config_from_options(opt: argparse.Namespace, vocab_size: int, special: dict[str, int]) -> HierSummConfig:
    """The model config the research options describe (their `inter_layers` are the global layers' indices)."""
    try:
        if getattr(opt, "inter_heads", opt.heads) != opt.heads:
            raise BundleError(f"inter_heads={opt.inter_heads} differs from heads={opt.heads}: not supported")
        if opt.enc_hidden_size != opt.dec_hidden_size or opt.emb_size != opt.enc_hidden_size:
            raise BundleError("encoder, decoder and embedding sizes must be equal")
        inter = {int(i) for i in getattr(opt, "inter_layers", [])}
        layers = tuple("global" if i in inter else "local" for i in range(opt.enc_layers))
        return HierSummConfig(vocab_size=vocab_size, d_model=opt.enc_hidden_size, encoder_heads=opt.heads,
                              decoder_heads=opt.heads, encoder_ffn_dim=opt.ff_size, decoder_ffn_dim=opt.ff_size,
                              encoder_layers=layers, decoder_layers=opt.dec_layers,
                              share_embeddings=bool(getattr(opt, "share_embeddings", False)),
                              tie_generator=bool(getattr(opt, "share_decoder_embeddings", False)), **special)
    except AttributeError as err:
        raise BundleError(f"the research options lack {err.name!r}") from None


def to_ours(state: dict[str, torch.Tensor], config: HierSummConfig) -> dict[str, torch.Tensor]:
    """Research names -> `HierSumm` names (the ranker left out: ours fills it)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if DROPPED.search(name):
            continue
        if name == "encoder.embeddings.weight":
            out["embed_tokens.weight"] = tensor
        elif name == "decoder.embeddings.weight":
            if not config.share_embeddings:
                out["decoder_tokens.weight"] = tensor
        elif name in ("encoder.layer_norm.weight", "encoder.layer_norm.bias"):
            out["encoder.norm." + name.rsplit(".", 1)[1]] = tensor
        elif name in ("decoder.layer_norm.weight", "decoder.layer_norm.bias"):
            out["final_norm." + name.rsplit(".", 1)[1]] = tensor
        elif name == "generator.0.weight":
            if not config.tie_generator:
                out["generator_weight"] = tensor
        elif name == "generator.0.bias":
            out["generator_bias"] = tensor
        elif match := re.match(r"^(encoder|decoder)\.transformer_layers\.(\d+)\.(.+)\.(weight|bias)$", name):
            side, index, part, kind = match.groups()
            out[_layer_name(side, int(index), part, config) + "." + kind] = tensor
        else:
            raise BundleError(f"{name!r} is not a weight of a hiersumm research model")
    return out


def _layer_name(side: str, index: int, part: str, config: HierSummConfig) -> str:
    if part.startswith("feed_forward."):
        prefix = f"encoder.layers.{index}" if side == "encoder" else f"layers.{index}"
        return f"{prefix}.feed_forward.{FEED_FORWARD[part.split('.', 1)[1]]}"
    if side == "decoder":
        table = DECODER
    else:
        table = GLOBAL if config.encoder_layers[index] == "global" else LOCAL
    if part not in table:
        raise BundleError(f"{side} layer {index}: {part!r} is not a part of a hiersumm research layer")
    return (f"encoder.layers.{index}." if side == "encoder" else f"layers.{index}.") + table[part]


def load_research(file, config_path: Path | None = None, kind: str | None = None):
    """A hiersumm research checkpoint file (`file`: not a plain state dict, it holds its options beside the weights)
    as a `HierSumm`; special token ids from a `tokenizer.json` beside it (`<pad>`, `<s>`, `</s>`), else BART's
    (1, 0, 2). `config_path` is unused: the file carries its options."""
    from .registry import build
    from .weights import Checkpoint, tokenizer_beside

    path = file.path

    if kind not in (None, KIND):
        raise BundleError(f"{path} is a hiersumm research checkpoint; it loads as hiersumm, not {kind}")
    state, opt = read_research(path)
    if "encoder.embeddings.weight" not in state:
        raise BundleError(f"{path} has no encoder.embeddings.weight: not a hiersumm research model")
    tokenizer = tokenizer_beside(path.parent)
    special = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2}
    if tokenizer is not None:
        from tokenizers import Tokenizer

        table = Tokenizer.from_file(str(tokenizer))
        found = {key: table.token_to_id(token) for key, token in
                 (("pad_token_id", "<pad>"), ("bos_token_id", "<s>"), ("eos_token_id", "</s>"))}
        special.update({k: v for k, v in found.items() if v is not None})
        special["decoder_start_token_id"] = special["bos_token_id"]
    config = config_from_options(opt, state["encoder.embeddings.weight"].shape[0], special)
    return Checkpoint(build(KIND, config, to_ours(state, config), str(path)), tokenizer)
