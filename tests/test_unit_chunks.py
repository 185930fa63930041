"""A unit's causal attention in chunks of its queries (`exporters.unit_chunks`): the rewritten encoder gives the
outputs of the one it was written from at every length (under, at and over the length where chunks start, lengths
that do not divide into the chunks, padded units), and the graph pruner (`exporters.graph_index.prune`) keeps what
subgraphs read.

Tolerance: 1e-5 times each output's largest magnitude where that is over 1 (the same sums, some grouped otherwise by
the kernel's blocking: seen up to 8e-7 on values about 1 on an AVX-512 machine; other instruction sets block the
products otherwise; a wrong mask or past moves outputs by their own size)."""

import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import LLAMA_FRAME, random_model, tiny_llama_config
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from locsum_sdk.exporters import graph_index, unit_chunks
from locsum_sdk.exporters.onnx import check_graph
from locsum_sdk.modeling import graphs, unit_attention
from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec
from locsum_sdk.modeling.registry import model_kind

VOCAB = 300
SHORTEST = 12  # chunks from 12 tokens on in these tests (the exporter's is longer)


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """A tiny fused encoder (heads 16 wide, LoRA adapters) as exported, and the same rewritten in chunks."""
    config = tiny_llama_config(VOCAB, d_model=64, lora_rank=4, lora_alpha=8.0, **LLAMA_FRAME)
    torch.manual_seed(0)
    net = random_model(lambda: LlamaHierEncDec(config), std=0.3).eval()
    folder = tmp_path_factory.mktemp("chunks")
    spec = model_kind("hierencdec").graphs(net)["encoder"]
    with unit_attention.fuse(net):
        graphs.export_graph(spec, folder / "plain.onnx", 17)
    shutil.copyfile(folder / "plain.onnx", folder / "chunked.onnx")
    count = unit_chunks.rewrite(folder / "chunked.onnx", shortest=SHORTEST)
    return net, folder, count


def sessions(folder):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return [ort.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])
            for name in ("plain.onnx", "chunked.onnx")]


def assert_same(expected: list[np.ndarray], got: list[np.ndarray]) -> None:
    for a, b in zip(expected, got, strict=True):
        assert a.shape == b.shape
        assert np.abs(a - b).max() <= 1e-5 * max(1.0, float(np.abs(a).max()))


def test_every_unit_attention_is_rewritten_and_the_graph_checks(encoders):
    net, folder, count = encoders
    assert count == net.config.layers
    graph = onnx.load(str(folder / "chunked.onnx"))
    top = [node.op_type for node in graph.graph.node]
    assert "GroupQueryAttention" not in top and top.count("If") == net.config.layers
    check_graph(folder / "chunked.onnx", None)
    again = folder / "again.onnx"
    shutil.copyfile(folder / "chunked.onnx", again)
    assert unit_chunks.rewrite(again) == 0  # nothing left to rewrite: its attentions are inside the If nodes


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 4), length=st.integers(1, 40), padded=st.lists(st.integers(0, 39), min_size=4, max_size=4),
       seed=st.integers(0, 2**16))
def test_chunked_attention_gives_the_plain_outputs(encoders, rows, length, padded, seed):
    _, folder, _ = encoders
    plain, chunked = sessions(folder)
    ids = np.random.default_rng(seed).integers(3, VOCAB, (rows, length))
    mask = np.ones((rows, length), np.int64)
    for row in range(1, rows):  # the first unit is the run's longest; the others padded at the end
        mask[row, max(1, length - padded[row] % length):] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    assert_same(plain.run(None, feeds), chunked.run(None, feeds))


@pytest.mark.parametrize("length", [SHORTEST - 1, SHORTEST, SHORTEST + 1, 4 * SHORTEST + 3])
def test_lengths_about_where_chunks_start(encoders, length):
    _, folder, _ = encoders
    plain, chunked = sessions(folder)
    ids = np.arange(2 * length).reshape(2, length) % (VOCAB - 3) + 3
    feeds = {"input_ids": ids, "attention_mask": np.ones((2, length), np.int64)}
    assert_same(plain.run(None, feeds), chunked.run(None, feeds))


def test_pruning_keeps_what_subgraphs_read():
    """A graph with a dead branch, and an If whose branch reads an outer value that no top-level node reads."""
    float_ = TensorProto.FLOAT
    branch = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["y_then"])], "then", [],
                               [helper.make_tensor_value_info("y_then", float_, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y_else"])], "else", [],
                              [helper.make_tensor_value_info("y_else", float_, None)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["y"], then_branch=branch, else_branch=other),
             helper.make_node("Mul", ["x", "dead_weight"], ["dead"]),
             helper.make_node("Relu", ["dead"], ["dead_too"])]
    initializers = [helper.make_tensor(name, float_, [], [value]) for name, value in
                    (("bias", 1.0), ("zero", 0.0), ("dead_weight", 2.0))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", float_, [3])],
                              [helper.make_tensor_value_info("y", float_, [3])], initializers)
    assert graph_index.prune(graph) == 2
    assert [node.op_type for node in graph.node] == ["ReduceSum", "Greater", "If"]
    assert sorted(init.name for init in graph.initializer) == ["bias", "zero"]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.array([1, 2, 3], np.float32)})[0].tolist() == [2, 3, 4]
