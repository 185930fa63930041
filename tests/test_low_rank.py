"""`low_rank`: a LoRA layer's `Add(y, (x @ A^T) @ (B s)^T)` found and written as one `Gemm` over the rows flattened,
the same sums (float32, within 1e-5 of the graph as written on ONNX Runtime), and an int8 export whose encoder keeps
its adapters' up-projections so while its decoder's stay int8 (the rebuild reads them back from there)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import LLAMA_FRAME, TINY_GENERATION, TINY_UNITS, random_model, tiny_llama_config
from onnx import TensorProto, helper, numpy_helper

from locsum_sdk import Summarizer
from locsum_sdk import constants as C
from locsum_sdk.exporters.low_rank import sum_as_gemm, up_projections
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.lora import LoRALinear
from locsum_sdk.modeling.pagesum import PageSum

RANK, K, N = 4, 24, 40


def layer_graph(adapter_first: bool = False, shared: bool = False) -> onnx.ModelProto:
    """x (R, T, K) -> x @ W + (x @ A^T) @ (B s)^T, the adapter on either side of the Add; `shared`: its product is
    also a graph output (so it must stay)."""
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((K, N)), "a_t": rng.standard_normal((K, RANK)),
               "b_t": rng.standard_normal((RANK, N))}
    initializers = [numpy_helper.from_array(value.astype(np.float32), name) for name, value in weights.items()]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("MatMul", ["x", "a_t"], ["z"]),
             helper.make_node("MatMul", ["z", "b_t"], ["up"]),
             helper.make_node("Add", ["up", "y"] if adapter_first else ["y", "up"], ["out"])]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["rows", "length", N])]
    if shared:
        outputs.append(helper.make_tensor_value_info("up", TensorProto.FLOAT, ["rows", "length", N]))
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             ["rows", "length", K])],
                              outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["out"], {"x": x})[0]


@pytest.mark.parametrize("adapter_first", [False, True])
def test_an_adapters_product_and_sum_become_one_gemm_with_the_same_output(adapter_first):
    written = layer_graph(adapter_first)
    x = np.random.default_rng(1).standard_normal((3, 5, K)).astype(np.float32)
    expected = run(written, x)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(written)
    ups = up_projections(rewritten)
    assert len(ups) == 1 and sum_as_gemm(rewritten, ups) == 1
    onnx.checker.check_model(rewritten, full_check=True)
    ops = [node.op_type for node in rewritten.graph.node]
    assert ops.count("Gemm") == 1 and "Add" not in ops and ops.count("MatMul") == 2
    gemm = next(node for node in rewritten.graph.node if node.op_type == "Gemm")
    assert gemm.input[1] == "b_t"
    np.testing.assert_allclose(run(rewritten, x), expected, rtol=1e-5, atol=1e-5)


def test_a_graph_without_a_lone_adapter_product_is_left_as_it_is():
    shared = layer_graph(shared=True)  # the up-projection is read elsewhere too: nothing to fold
    assert up_projections(shared) == []
    full = layer_graph()  # both sides as wide as the input: a product of two full matrices, not an adapter
    full.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.ones((K, K), np.float32), "a_t"))
    full.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.ones((K, N), np.float32), "b_t"))
    assert up_projections(full) == []


def test_an_int8_export_keeps_the_encoders_adapter_up_projections_in_float32(tmp_path, tokenizer, tokenizer_file):
    config = tiny_llama_config(tokenizer.get_vocab_size(), lora_rank=4, lora_alpha=8.0, **LLAMA_FRAME)
    model = random_model(lambda: PageSum(config))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoRALinear):
                module.lora_b.copy_(torch.randn(module.lora_b.shape, generator=generator) * 0.3)
    adapters = sum(isinstance(module, LoRALinear) for module in model.modules())
    checkpoint = save_checkpoint(model, tmp_path / "lora", tokenizer_file, units=TINY_UNITS,
                                 generation=TINY_GENERATION)
    bundle = export_onnx(checkpoint, tmp_path / "int8", quantize="int8")
    encoder = onnx.load(str(bundle.file(C.ENCODER_FILE)))
    values = {init.name: init for init in encoder.graph.initializer}
    gemms = [node for node in encoder.graph.node if node.op_type == "Gemm"]
    assert len(gemms) == adapters
    for node in gemms:
        up = values[node.input[1]]
        assert up.data_type == TensorProto.FLOAT and up.dims[0] == 4
    decoder = onnx.load(str(bundle.file(C.DECODER_FILE)))
    assert not [node for node in decoder.graph.node if node.op_type == "Gemm"]
    summary = Summarizer.from_pretrained(bundle.path, threads=1).summarize(
        "The board met on Monday. It approved the budget for the roof and the ramp. " * 4, max_length=8)
    assert 0 < len(summary.token_ids) <= 8
