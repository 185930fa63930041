"""The graphs the exporters write, declared in one place: wrapper modules, example inputs and dynamic axes."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import constants as C
from .. import kinds
from ..configs.model import step_shape
from ..kinds import GraphIO
from ..ops import doc_scaled_attention, page_combine


@dataclass(frozen=True)
class GraphSpec:
    """Everything the exporter needs to know about one graph."""

    module: nn.Module  # the wrapper whose forward is the graph
    example: tuple[torch.Tensor, ...]  # example inputs (dynamic axes must not be 1 here)
    inputs: list[str]  # input names, in forward order
    outputs: list[str]  # output names
    axes: dict[str, dict[int, str]]  # dynamic axes by tensor name


def torch_version() -> str:
    return torch.__version__


def register_symbolics(opset: int) -> None:
    """Export `locsum::page_combine` as one `locsum.PageCombine` node whose body is the onnxscript function."""
    page_combine.torch_op()

    def symbolic(g, hidden, scores, mask):
        mixed, weights = g.onnxscript_op(page_combine.function(), hidden, scores, mask, outputs=2)
        mixed.setType(hidden.type().with_sizes([None, None, None]))  # (B, K, D)
        weights.setType(scores.type())  # (B, U, K)
        return mixed, weights

    torch.onnx.register_custom_op_symbolic(page_combine.TORCH_NAME, symbolic, opset)


def register_doc_scaled_attention(opset: int) -> None:
    """Export `locsum::doc_scaled_attention` as one `locsum.DocScaledAttention` node per use, whose body is the
    onnxscript function."""
    doc_scaled_attention.torch_op()

    def symbolic(g, query, key, value, key_mask, doc_mask):
        out, weights = g.onnxscript_op(doc_scaled_attention.function(), query, key, value, key_mask, doc_mask,
                                       outputs=2)
        out.setType(query.type().with_sizes([None, None, None, None]))  # (B, H, Q, d)
        weights.setType(query.type().with_sizes([None, None, None, None]))  # (B, D, H, Q)
        return out, weights

    torch.onnx.register_custom_op_symbolic(doc_scaled_attention.TORCH_NAME, symbolic, opset)


def _example(spec: GraphSpec) -> tuple[torch.Tensor, ...]:
    return tuple(t.clone() for t in spec.example)  # the decoder step writes its cache inputs


def outputs(spec: GraphSpec) -> list[np.ndarray]:
    """The torch outputs of a graph's module on its example inputs."""
    spec.module.eval()
    with torch.no_grad():
        return [t.numpy() for t in spec.module(*_example(spec))]


def _export(module: nn.Module, spec: GraphSpec, example: tuple[torch.Tensor, ...], path: Path, opset: int,
            weights: list[str] = ()) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, example, str(path), input_names=[*spec.inputs, *weights], output_names=spec.outputs,
            dynamic_axes=spec.axes, opset_version=opset, dynamo=False, do_constant_folding=not weights,
        )
    spec.module.eval()  # the exporter restores the wrapper's mode, which may switch the model back to training


def export_graph(spec: GraphSpec, path: Path, opset: int) -> list[np.ndarray]:
    """Export one graph (TorchScript exporter) and return the torch outputs on its example inputs."""
    expected = outputs(spec)
    _export(spec.module, spec, _example(spec), path, opset)
    return expected


class _WeightsAsInputs(nn.Module):
    """A graph's module whose weights are inputs after the graph's own: each call puts them in the module's place
    for the call. The exporter then holds no weight of its own (it would read every one's values, which a stand-in
    has none of, as it infers the graph's shapes)."""

    def __init__(self, spec: GraphSpec):
        super().__init__()
        object.__setattr__(self, "inner", spec.module)  # not a submodule: its weights are not the wrapper's
        self.count = len(spec.inputs)
        self.names = list(spec.module.state_dict(keep_vars=True))

    def forward(self, *args: torch.Tensor):
        saved = []
        for name, value in zip(self.names, args[self.count:]):
            owner, _, attr = name.rpartition(".")
            module = self.inner.get_submodule(owner)
            table = module._parameters if attr in module._parameters else module._buffers
            saved.append((table, attr, table[attr]))
            table[attr] = value
        try:
            return self.inner(*args[:self.count])
        finally:
            for table, attr, value in saved:
                table[attr] = value


def export_structure(spec: GraphSpec, path: Path, opset: int) -> None:
    """Export one graph without its weights: each tensor of the module's state is an input after the graph's own,
    named as in the state, for the exporter to make an initializer of (`exporters.streamed`). Constants are not
    folded (folding needs the weights' values); ONNX Runtime folds them when a session is made."""
    wrapper = _WeightsAsInputs(spec)
    state = spec.module.state_dict(keep_vars=True)
    _export(wrapper, spec, _example(spec) + tuple(t.detach() for t in state.values()), path, opset, wrapper.names)


class EncoderGraph(nn.Module):
    """The kind's encoder inputs (input_ids, attention_mask (N, L), ...) -> encoder_hidden (N, L, D) and every
    layer's cross key/value."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor):
        memory, cross = self.model.encode(*inputs)
        return (memory, *[t for kv in cross for t in kv])


class DecoderGraph(nn.Module):
    """One decoding step; ends in `locsum.PageCombine` and the LM head on the mixed rows. Each present cache is
    its past written at `position` (a ScatterND on the input), so a runtime that binds both to one buffer gets
    the write in place."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.layers = model.config.decoder_layers
        self.copy = model.config.copy

    def forward(self, input_ids, unit_mask, encoder_attention_mask, *rest):
        unit_ids, rest = (rest[0], rest[1:]) if self.copy else (None, rest)  # a copying model reads unit tokens
        position, cache_slots, kv = rest[0], rest[1], rest[2:]
        cache = [(kv[2 * i], kv[2 * i + 1]) for i in range(self.layers)]
        cross = [(kv[2 * (self.layers + i)], kv[2 * (self.layers + i) + 1]) for i in range(self.layers)]
        copying = {"encoder_input_ids": unit_ids} if self.copy else {}
        log_probs, weights = self.model.step(input_ids, unit_mask, encoder_attention_mask, position, cache_slots,
                                             cache, cross, **copying)
        return (log_probs, weights, *[t for layer in cache for t in layer])


def encoder_spec(model: nn.Module, items: int = 2, units: int = 3, length: int = 12) -> GraphSpec:
    """encoder.onnx, traced on `items` x `units` grid rows (the last one a padding unit), with the inputs the
    model's kind declares."""
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    rows = items * units
    unit_mask = torch.ones(items, units, dtype=torch.bool)
    unit_mask[-1, -1] = False
    input_ids = torch.randint(3, cfg.vocab_size, (rows, length), generator=g)
    input_ids[:, 0] = cfg.bos_token_id  # every unit starts with <s>
    attention_mask = torch.ones(rows, length, dtype=torch.int64)
    attention_mask[1, length // 2 :] = 0
    attention_mask[~unit_mask.reshape(-1)] = 0
    example = {C.INPUT_IDS: input_ids, C.ATTENTION_MASK: attention_mask, C.UNIT_MASK: unit_mask}
    io = declared(model)["encoder"]
    inputs = tuple(example[name] for name in io.input_names)
    return GraphSpec(EncoderGraph(model), inputs, io.input_names, io.output_names, io.axes)


def decoder_spec(
    model: nn.Module, batch: int = 2, units: int = 3, beams: int = 2, length: int = 12, capacity: int = 5
) -> GraphSpec:
    """decoder.onnx, traced at position 2 of a cache of `capacity` positions."""
    cfg = model.config
    shape = step_shape(cfg.to_dict())
    heads, dim, rows = shape.cache_heads, shape.head_dim, batch * units
    unit_mask = torch.ones(batch, units, dtype=torch.bool)
    unit_mask[1, units - 1] = False
    encoder_attention_mask = torch.ones(rows, length, dtype=torch.int64)
    encoder_attention_mask[1, length // 2 :] = 0
    g = torch.Generator().manual_seed(1)
    cache_slots = torch.full((batch, beams, capacity), -1)  # beams whose histories went through both slots
    cache_slots[:, :, :2] = torch.randint(0, beams, (batch, beams, 2), generator=g)
    cache_slots[:, :, 2] = torch.arange(beams)
    unit_ids = torch.randint(3, max(4, cfg.vocab_size // 8), (rows, length), generator=g)  # ids repeat: copies add up
    unit_ids[~unit_mask.reshape(-1)] = 0
    example = [
        torch.randint(3, cfg.vocab_size, (batch, beams), generator=g),
        unit_mask,
        encoder_attention_mask,
        *([unit_ids] if cfg.copy else []),
        torch.tensor([2]),
        cache_slots,
    ]
    for groups in kinds.get(model.kind).on(cfg.to_dict()).layout.cache_groups(batch, units, shape):
        example += [torch.randn(groups, heads, beams, capacity, dim, generator=g) for _ in range(2)]
    for _ in range(shape.layers):
        example += [torch.randn(rows, heads, dim, length, generator=g),
                    torch.randn(rows, heads, length, dim, generator=g)]
    io = declared(model)["decoder"]
    return GraphSpec(DecoderGraph(model), tuple(example), io.input_names, io.output_names, io.axes)


def declared(model: nn.Module) -> dict[str, GraphIO]:
    """The model's graphs as its kind declares them (names, dtypes, dynamic axes)."""
    return kinds.get(model.kind).graphs(model.config.to_dict())
