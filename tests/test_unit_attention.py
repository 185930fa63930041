"""A unit's own causal attention through one operator (`modeling.unit_attention`), exported as ONNX Runtime's
GroupQueryAttention in the fused form's encoder.

Tolerances: the torch operator is `extend`'s maths called as it is, so torch agrees with itself bit for bit; the
exported float32 encoder agrees with torch to 1e-4 (ONNX Runtime's kernel sums in another order) on every output."""

import numpy as np
import onnx
import onnxruntime as ort
import torch
from conftest import LLAMA_FRAME, random_model, tiny_llama_config

from locsum_sdk.modeling import graphs, unit_attention
from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec
from locsum_sdk.modeling.registry import model_kind

VOCAB = 300


def tiny(d_model: int = 64) -> LlamaHierEncDec:
    """4 query heads sharing 2 key/value heads, 16 wide (or d_model / 4), with LoRA adapters."""
    config = tiny_llama_config(VOCAB, d_model=d_model, lora_rank=4, lora_alpha=8.0, **LLAMA_FRAME)
    return random_model(lambda: LlamaHierEncDec(config), std=0.3).eval()


def units() -> tuple[torch.Tensor, torch.Tensor]:
    """Three units of 9 tokens, the second and third padded at the end."""
    ids = torch.randint(3, VOCAB, (3, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:], mask[2, 2:] = 0, 0
    return ids, mask


def test_the_operator_is_extend_without_a_past():
    net = tiny()
    ids, mask = units()
    with torch.no_grad():
        hidden, kv = net.encode(ids, mask)
        with unit_attention.fuse(net):
            fused_hidden, fused_kv = net.encode(ids, mask)
    assert torch.equal(hidden, fused_hidden)
    assert all(torch.equal(a, b) for layer, fused in zip(kv, fused_kv) for a, b in zip(layer, fused))
    assert all(layer.self_attn.unit_attention is None for layer in net.model.layers)  # restored after the block


def export_encoder(net: LlamaHierEncDec, path) -> tuple[onnx.ModelProto, list[np.ndarray], list[np.ndarray]]:
    """The encoder graph exported under `fuse`, and its ONNX Runtime and torch outputs on `units`."""
    spec = model_kind("hierencdec").graphs(net)["encoder"]
    with unit_attention.fuse(net):
        graphs.export_graph(spec, path, 17)
    ids, mask = units()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    with torch.no_grad():
        expected = [t.numpy() for t in spec.module(ids, mask)]
    return onnx.load(str(path)), got, expected


def test_an_exported_encoder_attends_through_group_query_attention(tmp_path):
    net = tiny()
    graph, got, expected = export_encoder(net, tmp_path / "encoder.onnx")
    ops = [node.op_type for node in graph.graph.node]
    assert ops.count("GroupQueryAttention") == net.config.layers
    assert "Softmax" not in ops  # no score tensor of its own
    assert len(got) == len(expected) == 1 + 2 * net.config.layers  # the hidden states, every layer's keys, values
    for value, reference in zip(got, expected):
        assert value.shape == reference.shape
        assert np.abs(value - reference).max() < 1e-4


def test_heads_the_kernel_does_not_take_are_exported_as_written(tmp_path):
    net = tiny(d_model=32)  # heads 8 wide: GroupQueryAttention's CPU kernel takes multiples of 16
    graph, got, expected = export_encoder(net, tmp_path / "encoder.onnx")
    assert not any(node.op_type == "GroupQueryAttention" for node in graph.graph.node)
    assert max(float(np.abs(value - reference).max()) for value, reference in zip(got, expected)) < 1e-4
