"""A Llama backbone's decoding step written with ONNX Runtime's fused operators, for the CPU (and CUDA) path.

`llama` is the maths; this writes the same step with few operator runs: each projection group is one
`MatMulNBits` over block weights (`blockwise`; query/key/value as one, gate/up as one), RMSNorm with the residual
add is `SkipSimplifiedLayerNormalization`, SiLU is `QuickGelu`, and every shape a layer needs is built once per
step. A block's offset and a LoRA adapter (kept apart from the pretrained weight, as `lora` has it) are one
small pair beside the projection: x @ [block sums | A], one 8-bit `MatMulNBits` (exact rows for the sums, A in
8-bit blocks: a quarter of the bytes a float32 MatMul reads each step), then @ [offsets | B s] in float32.

The attention over the units (the kind's combination of its units' caches) is the kind's: `STEPS` maps a kind's
name to the function writing its step on these pieces (`fused_hierencdec` for HierEncDec).

Weights come from the torch module; where a `GGUFFile` is given, a projection equal to one of its block-32
tensors takes that tensor's blocks as they are (`blockwise.from_gguf`), so the model that runs is the file's. A
weight quantized here instead (float in the file, or no file) takes its adapter in before rounding, W + B s A in
4-bit blocks with a zero point each (`blockwise.zero_point_blocks`): one rounding, as the weight alone would have
had, and nothing beside the projection.
"""

from __future__ import annotations

import importlib
import itertools
import json
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from torch import nn

from .. import blockwise, kinds
from ..blockwise import BlockWeight
from ..errors import ExportError
from ..gguf_file import GGUFFile
from ..llm.gguf_model import GLOBAL_TENSORS, LAYER_TENSORS, oriented_tensors
from .llama import Llama, frequencies
from .lora import LoRALinear
from .onnx_builder import ELEMENT_TYPES, MS, GraphBuilder

PLAIN_TYPES = (0, 1, 30)  # ggml's F32, F16 and BF16: float weights, quantized to the bundle's bits
ACCURACY = 4  # MatMulNBits' int8 compute (activations quantized per block of 32); 0 computes in float32
HF_TO_GGUF = {**{hf: gguf for gguf, hf in LAYER_TENSORS.items()}, **{hf: gguf for gguf, hf in GLOBAL_TENSORS.items()}}


class BlockSource:
    """Block weights for a module's projections: a GGUF file's blocks where the projection is exactly one of its
    tensors of a type with one step per 32 values (`blockwise.GGUF_TYPES`); 8-bit blocks quantized from one of its
    other quantized tensors (Q2_K, Q3_K, Q6_K: sub-blocks of 16), the closest form to the file's codes; else the
    float weight quantized to `bits`."""

    def __init__(self, gguf: GGUFFile | None = None, bits: int = 4, merge: bool = True):
        self.gguf, self.bits, self.merge = gguf, bits, merge  # merge: see `projection`
        self.from_file: list[str] = []  # the projections taken from the file, for the exporter's report

    def blocks(self, name: str, weight: np.ndarray, bits: int | None = None) -> BlockWeight:
        """`name`: the HF name without `model.` (e.g. layers.3.self_attn.q_proj.weight)."""
        found, wanted = self.locate(name, weight)
        return found if found is not None else blockwise.quantize(weight, wanted or bits or self.bits)

    def locate(self, name: str, weight: np.ndarray) -> tuple[BlockWeight | None, int | None]:
        """The file's blocks where `weight` is one of its tensors, value for value, of a type with a block form (else
        None), and the bits a weight quantized here must take where the file says: 8 where the file holds this
        tensor in a quantized type with no block form (its values, or a fine-tune of them, nearer those codes in 8),
        else None."""
        gguf_name = self._file_name(name, weight.shape)
        kind = None if gguf_name is None else self.gguf.tensors[gguf_name].type
        if kind is None or kind in PLAIN_TYPES:
            return None, None
        if kind not in blockwise.GGUF_TYPES:
            return None, 8
        _, values = next(oriented_tensors(self.gguf, [gguf_name]))
        found = blockwise.file_blocks(self.gguf, gguf_name) if np.array_equal(values, weight) else None
        if found is not None:
            self.from_file.append(name)
        return found, None

    def _file_name(self, name: str, shape: tuple[int, ...]) -> str | None:
        """The GGUF name of the file's tensor in the place of `name`, of this shape; None where it has none or there
        is no file."""
        if self.gguf is None:
            return None
        parts = name.split(".")
        if parts[0] == "layers":
            gguf_name = f"blk.{parts[1]}.{HF_TO_GGUF.get('.'.join(parts[2:-1]), '?')}.{parts[-1]}"
        else:
            gguf_name = f"{HF_TO_GGUF.get(parts[0], '?')}.{parts[-1]}"
        info = self.gguf.tensors.get(gguf_name)
        return gguf_name if info is not None and tuple(info.shape) == tuple(shape) else None


ADAPTERS = "locsum.adapters"  # the step graph's metadata key: where each projection's adapter is (`adapter_record`)


@dataclass(frozen=True)
class Projection:
    """Projections sharing an input, one above the other: their block weights (kept apart, so that each is one
    initializer a bundle can assemble from its file; the graph concatenates them, which ONNX Runtime folds when it
    loads it), bias, the LoRA update's A (r, K) and B s (N, r) where it runs beside them, the modules' names (HF,
    without `model.`), and whether their adapters are merged into the blocks (`projection`)."""

    parts: list[BlockWeight]
    bias: np.ndarray | None
    lora_a: np.ndarray | None
    lora_b: np.ndarray | None
    names: tuple[str, ...] = ()
    merged: bool = False


def projection(linears: list[nn.Linear], names: list[str], source: BlockSource) -> Projection:
    """Several nn.Linear (or LoRALinear) of one input, as one projection (biases and adapters stacked). Where none of
    their weights is the file's, so that each is quantized here anyway, and the source's `merge`: each adapter is
    added into its weight before quantizing (W + B s A, `merged_weight`), one rounding as the weight alone would have
    had, and the projection is one `MatMulNBits` with nothing beside it. A file's blocks keep their adapter beside
    them: the model that runs stays the file's (rounding the sum again would move every weight by up to half a
    step)."""
    adapted = [lin for lin in linears if isinstance(lin, LoRALinear)]
    if adapted and len(adapted) != len(linears):
        raise ExportError("projections sharing an input must all have adapters or none")
    weights = [linear.weight.detach().float().numpy() for linear in linears]
    located = [source.locate(name, weight) for name, weight in zip(names, weights)]
    merged = bool(adapted) and source.merge and all(found is None for found, _ in located)
    if merged:
        weights = [merged_weight(linear) for linear in linears]
    parts = [found if found is not None else blockwise.quantize(weight, wanted or source.bits)
             for (found, wanted), weight in zip(located, weights)]
    biases = [linear.bias for linear in linears]
    bias = None
    if any(b is not None for b in biases):
        bias = np.concatenate([np.zeros(lin.out_features, np.float32) if b is None else b.detach().float().numpy()
                               for lin, b in zip(linears, biases)])
    modules = tuple(name.removesuffix(".weight") for name in names)
    if not adapted or merged:
        return Projection(parts, bias, None, None, modules, merged)
    lora_a = np.concatenate([lin.lora_a.detach().float().numpy() for lin in linears])
    rank = linears[0].lora_a.shape[0]
    lora_b = np.zeros((sum(part.shape[0] for part in parts), rank * len(linears)), np.float32)
    row = 0
    for i, lin in enumerate(linears):
        lora_b[row:row + lin.out_features, i * rank:(i + 1) * rank] = (lin.lora_b * lin.scaling).detach().float()
        row += lin.out_features
    return Projection(parts, bias, lora_a, lora_b, modules)


def merged_weight(linear: nn.Linear) -> np.ndarray:
    """A LoRA layer's weight with its adapter added, W + B s A, summed in float64 one rank at a time (so that every
    machine gets the same float32)."""
    weight = linear.weight.detach().double().numpy()
    down = linear.lora_a.detach().double().numpy()
    up = (linear.lora_b * linear.scaling).detach().double().numpy()
    for r in range(down.shape[0]):
        weight = weight + up[:, r:r + 1] * down[r:r + 1, :]
    return weight.astype(np.float32)


def block_sum_rows(columns: int) -> BlockWeight:
    """8-bit block rows summing x over each block of 32 inputs: row b is 1 on block b and 0 elsewhere (codes one
    above the centre there, scale 1), the factor an offset per block needs."""
    blocks = -(-columns // blockwise.BLOCK)
    centre = 1 << 7
    codes = np.full((blocks, columns), centre, np.uint8)
    codes[np.arange(columns) // blockwise.BLOCK, np.arange(columns)] = centre + 1
    return BlockWeight(codes, np.ones((blocks, blocks), np.float32), None, 8)


def stacked_const(g: GraphBuilder, arrays: list[np.ndarray], axis: int, stem: str,
                  names: list[str] | None = None) -> str:
    """One initializer per array, concatenated along `axis` in the graph (folded by ONNX Runtime at load); `names`
    gets the initializers' names."""
    held = [g.const(array, stem) for array in arrays]
    if names is not None:
        names.extend(held)
    return held[0] if len(held) == 1 else g.op("Concat", *held, axis=axis)


def linear(g: GraphBuilder, x: str, p: Projection, accuracy: int, adapters: list[dict] | None = None) -> str:
    """x (R, K) -> (R, N): MatMulNBits, plus x @ [block sums | A] @ [offsets | B s] where either is present: the first
    product one 8-bit MatMulNBits (the block sums' rows and A in 8-bit blocks), the second and the sum one Gemm. Where
    the projection has an adapter, `adapters` gets its record: the modules and the initializers holding A's 8-bit
    codes and scales (r * modules rows of K) and (B s)^T (r * modules, N); where its adapters are merged, the
    modules and the initializers holding each one's blocks (`merged_record`)."""
    k = p.parts[0].shape[1]
    widths = [list(parts) for _, parts in itertools.groupby(p.parts, key=lambda part: part.bits)]  # a file may mix
    # 4- and 8-bit types: one MatMulNBits per width, side by side; the bias in the product where there is one
    bias = None if p.bias is not None and len(widths) > 1 else p.bias
    held: dict[str, list[str]] = {"codes": [], "scales": [], "zero_points": []}  # each part's initializers
    outputs = []
    for parts in widths:
        zero_points = []
        extras = product_extras(g, parts, bias, zero_points)
        held["zero_points"].extend(zero_points or [""] * len(parts))
        outputs.append(g.op("MatMulNBits", x, stacked_const(g, [part.form("codes") for part in parts], 0, "weight",
                                                            held["codes"]),
                            stacked_const(g, [part.form("scales") for part in parts], 0, "scales", held["scales"]),
                            *extras, domain=MS, K=k, N=sum(part.shape[0] for part in parts), bits=parts[0].bits,
                            block_size=blockwise.BLOCK, accuracy_level=accuracy))
    if p.merged and adapters is not None:
        adapters.append(merged_record(p, held))
    y = outputs[0] if len(outputs) == 1 else g.op("Concat", *outputs, axis=-1)
    if p.bias is not None and bias is None:
        y = g.op("Add", y, g.const(p.bias, "bias"))
    codes, scales, rows, up = [], [], 0, []
    if any(part.offsets is not None for part in p.parts):
        sums = block_sum_rows(k)
        codes.append(g.const(sums.form("codes"), "block_sums"))
        scales.append(g.const(sums.form("scales"), "block_sums"))
        rows += sums.shape[0]
        up.append(stacked_const(g, [part.form("offsets") if part.offsets is not None
                                    else np.zeros((sums.shape[0], part.shape[0]), np.float32) for part in p.parts], 1,
                                "offsets"))
    if p.lora_a is not None:
        down = blockwise.quantize(p.lora_a, 8)
        codes.append(g.const(down.form("codes"), "lora_a"))
        scales.append(g.const(down.form("scales"), "lora_a_scales"))
        rows += down.shape[0]
        up.append(g.const(p.lora_b.T, "lora_b"))
        if adapters is not None:
            adapters.append({"modules": list(p.names), "lora_a": codes[-1], "lora_a_scales": scales[-1],
                             "lora_b": up[-1]})
    if not codes:
        return y
    down_product = g.op("MatMulNBits", x, codes[0] if len(codes) == 1 else g.op("Concat", *codes, axis=0),
                        scales[0] if len(scales) == 1 else g.op("Concat", *scales, axis=0), domain=MS, K=k, N=rows,
                        bits=8, block_size=blockwise.BLOCK, accuracy_level=accuracy)
    up_matrix = up[0] if len(up) == 1 else g.op("Concat", *up, axis=0)
    return g.op("Gemm", down_product, up_matrix, y)  # z @ up + y


def product_extras(g: GraphBuilder, parts: list[BlockWeight], bias: np.ndarray | None, names: list[str]) -> list[str]:
    """`MatMulNBits`' optional inputs after its scales: zero points where a part has its own (their initializers'
    names added to `names`), the bias where given."""
    extras = ["", "", ""]
    if any(part.zero_points is not None for part in parts):
        extras[0] = stacked_const(g, [part.form("zero_points") for part in parts], 0, "zero_points", names)
    if bias is not None:
        extras[2] = g.const(bias, "bias")
    while extras and not extras[-1]:
        extras.pop()
    return extras


def merged_record(p: Projection, held: dict[str, list[str]]) -> dict:
    """The record of a projection whose adapters are merged: its modules, and for each the bits and initializers of
    its blocks (codes, scales and zero points, where it has them), what the step runs."""
    parts = []
    for index, part in enumerate(p.parts):
        parts.append({"bits": part.bits, "codes": held["codes"][index], "scales": held["scales"][index]})
        if held["zero_points"][index]:
            parts[-1]["zero_points"] = held["zero_points"][index]
    return {"modules": list(p.names), "merged": parts}


@dataclass(frozen=True)
class LayerWeights:
    input_norm: np.ndarray
    qkv: Projection
    output: Projection
    post_norm: np.ndarray
    gate_up: Projection
    down: Projection


def layer_weights(model: Llama, source: BlockSource) -> list[LayerWeights]:
    layers = []
    for i, layer in enumerate(model.layers):
        attn, mlp = layer.self_attn, layer.mlp

        def names(*parts: str) -> list[str]:
            return [f"layers.{i}.{part}.weight" for part in parts]  # noqa: B023 (used at once)

        layers.append(LayerWeights(
            layer.input_layernorm.weight.detach().float().numpy(),
            projection([attn.q_proj, attn.k_proj, attn.v_proj],
                       names("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), source),
            projection([attn.o_proj], names("self_attn.o_proj"), source),
            layer.post_attention_layernorm.weight.detach().float().numpy(),
            projection([mlp.gate_proj, mlp.up_proj], names("mlp.gate_proj", "mlp.up_proj"), source),
            projection([mlp.down_proj], names("mlp.down_proj"), source)))
    return layers


class Backbone:
    """The pieces of a Llama step every kind shares, written into `g`: embedding, norms, projections, rotary,
    cache writes, the LM head."""

    def __init__(self, g: GraphBuilder, model: Llama, source: BlockSource, accuracy: int = ACCURACY):
        config = model.config
        self.g, self.config, self.accuracy = g, config, accuracy
        self.adapters: list[dict] = []  # `linear`'s records, for the graph's metadata (`adapter_record`)
        self.layers = layer_weights(model, source)
        self.final_norm = model.norm.weight.detach().float().numpy()
        embedding = model.embed_tokens.weight.detach().float().numpy()
        self.embedding = source.blocks("embed_tokens.weight", embedding, bits=8)
        head = self.embedding if config.tie_embeddings else source.blocks(
            "lm_head.weight", model.lm_head.weight.detach().float().numpy(), bits=8)
        self.head = Projection([head], None, None, None)  # a tied head's initializers are the embedding's
        half = frequencies(config).numpy()
        self.half_frequencies = g.const(half[None, :], "frequencies")  # (1, d/2)
        self.frequencies = g.const(np.concatenate([half, half])[None, :], "frequencies")  # (1, d)
        d = config.head_dim
        turn = np.zeros((d, d), np.float32)  # x @ turn = cat(-x2, x1): the rotary's other half, as one MatMul
        turn[np.arange(d // 2) + d // 2, np.arange(d // 2)] = -1
        turn[np.arange(d // 2), np.arange(d // 2) + d // 2] = 1
        self.turn = g.const(turn, "turn")

    def embed(self, ids: str) -> str:
        """Token ids (R,) -> their embeddings (R, D), dequantized block by block from the embedding's codes."""
        g, e = self.g, self.embedding
        codes = g.op("Gather", g.const(e.form("codes"), "embedding"), ids)  # (R, blocks, 32 * bits / 8)
        if e.bits == 4:  # two codes a byte, the first in the low nibble
            wide = g.op("Cast", codes, to=onnx.TensorProto.INT32)
            sixteen = g.const(np.int32(16))
            low, high = g.op("Mod", wide, sixteen), g.op("Div", wide, sixteen)
            pairs = g.op("Concat", g.op("Unsqueeze", low, g.ints(-1)), g.op("Unsqueeze", high, g.ints(-1)), axis=-1)
            codes = g.op("Reshape", pairs, g.ints(0, 0, -1))
        values = g.op("Sub", g.op("Cast", codes, to=onnx.TensorProto.FLOAT), g.const(np.float32(e.centre)))
        scales = g.op("Reshape", g.const(e.form("scales"), "scales"), g.ints(e.shape[0], -1))
        values = g.op("Mul", values, g.op("Unsqueeze", g.op("Gather", scales, ids), g.ints(-1)))
        if e.offsets is not None:
            offsets = g.op("Transpose", g.op("Gather", g.const(e.form("offsets"), "offsets"), ids, axis=1),
                           perm=[1, 0])
            values = g.op("Add", values, g.op("Unsqueeze", offsets, g.ints(-1)))
        flat = g.op("Reshape", values, g.ints(0, -1))
        return g.op("Slice", flat, g.ints(0), g.ints(self.config.d_model), g.ints(1))

    def codes(self, positions: str) -> tuple[str, str]:
        """Integer positions (...) -> rotary cos, sin (..., d), as `llama.rotary` computes them."""
        return self._cos_sin(positions, self.frequencies)

    def rotary_cache(self, positions: str) -> tuple[str, str]:
        """Integer positions (N,) -> the cos and sin caches (N, d/2) of `RotaryEmbedding` (row i: position i's)."""
        return self._cos_sin(positions, self.half_frequencies)

    def _cos_sin(self, positions: str, frequencies: str) -> tuple[str, str]:
        g = self.g
        angles = g.op("Mul", g.op("Unsqueeze", g.op("Cast", positions, to=onnx.TensorProto.FLOAT), g.ints(-1)),
                      frequencies)
        return g.op("Cos", angles), g.op("Sin", angles)

    def rotary(self, x: str, position_ids: str, cos_cache: str, sin_cache: str) -> str:
        """x (batch, heads, seq, d) rotated as `llama.rotate` at the cache's row position_ids (batch, seq) names:
        one `RotaryEmbedding` (halves, not interleaved)."""
        return self.g.op("RotaryEmbedding", x, position_ids, cos_cache, sin_cache, domain=MS, interleaved=0)

    def rotate(self, x: str, turned: str, cos: str, sin: str) -> str:
        """x * cos + turn(x) * sin (`llama.rotate`), `turned` = x @ turn."""
        g = self.g
        return g.op("Add", g.op("Mul", x, cos), g.op("Mul", turned, sin))

    def norm(self, x: str, weight: np.ndarray, skip: str | None = None) -> tuple[str, str]:
        """RMSNorm of x (+ skip): (normed, the sum that was normed)."""
        g, eps = self.g, float(self.config.rms_eps)
        if skip is None:
            return g.op("SimplifiedLayerNormalization", x, g.const(weight, "norm"), axis=-1, epsilon=eps), x
        out = g.op("SkipSimplifiedLayerNormalization", x, skip, g.const(weight, "norm"), outputs=4, domain=MS,
                   epsilon=eps)
        return out[0], out[3]

    def linear(self, x: str, p: Projection) -> str:
        return linear(self.g, x, p, self.accuracy, self.adapters)

    def mlp(self, x: str, w: LayerWeights) -> str:
        g = self.g
        gate, up = g.op("Split", self.linear(x, w.gate_up), g.ints(self.config.ffn_dim, self.config.ffn_dim),
                        outputs=2, axis=-1)
        return self.linear(g.op("Mul", g.op("QuickGelu", gate, domain=MS, alpha=1.0), up), w.down)

    def log_probs(self, hidden: str) -> str:
        """Final hidden (R, D) after the norm -> log-probabilities (R, V)."""
        return self.g.op("LogSoftmax", self.linear(hidden, self.head), axis=-1)


Step = Callable[..., onnx.ModelProto]  # (backbone, model[, unit rows, their scales]) -> the step graph
STEPS: dict[tuple[str, str], Step] = {}  # (kind, form) -> the function writing its step
FORMS = {0: "slots", 32: "rows", 8: "rows"}  # a Llama config's unit_rows -> the step's form


def register_step(kind: str, step: Step, form: str = "slots") -> Step:
    STEPS[kind, form] = step
    return step


def check_fusable(model: nn.Module, unit_rows: int = 0) -> None:
    """ExportError unless `model` is a kind with a fused step (`register_step`, in `modeling.fused_<kind>`) in the
    form `unit_rows` names (`LlamaConfig.unit_rows`) on a Llama backbone."""
    package = __name__.rpartition(".")[0]
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if module.name.startswith("fused_") and module.name != "fused_llama":
            importlib.import_module(f"{package}.{module.name}")
    form = FORMS[unit_rows]
    if (model.kind, form) not in STEPS:
        written = sorted(f"{kind} ({shape})" for kind, shape in STEPS)
        raise ExportError(f"no fused step is written for {model.kind!r} in the {form} form ({', '.join(written)} "
                          "have one); export it with quantize int8")
    if not isinstance(getattr(model, "model", None), Llama):
        raise ExportError(f"the fused step runs {model.kind} on a Llama backbone; this one is on "
                          f"{model.config.to_dict().get('backbone', 'bart')}: export it with quantize int8")


def fused_step(model: nn.Module, gguf: GGUFFile | None = None, bits: int = 4, accuracy: int = ACCURACY,
               merge: bool = True, unit_rows: int | None = None,
               unit_scales: np.ndarray | None = None) -> tuple[onnx.ModelProto, list[str]]:
    """The decoding step of `model` (a kind on a Llama backbone, its module holding `.model`) as a fused graph with
    the kind's step IO, and the projections whose blocks are the file's. A kind's step is written by its module
    `modeling.fused_<kind>`, which registers it (`register_step`) in the form its config's `unit_rows` names.
    `merge`: adapters merged into the weights that are quantized here (`projection`); False keeps every adapter
    beside its projection. `unit_rows`: the form (`LlamaConfig.unit_rows`) where it is not the config's;
    `unit_scales`: int8 unit rows' scales (`fused_unit_rows`)."""
    rows = getattr(model.config, "unit_rows", 0) if unit_rows is None else unit_rows
    check_fusable(model, rows)
    source = BlockSource(gguf, bits, merge)
    g = GraphBuilder(f"{model.kind}_step")
    backbone = Backbone(g, model.model, source, accuracy)
    form = FORMS[rows]
    graph = STEPS[model.kind, form](backbone, model, *([rows, unit_scales] if form == "rows" else []))
    check_io(graph, kinds.get(model.kind).graphs({**model.config.to_dict(), "unit_rows": rows})["decoder"])
    if backbone.adapters:
        onnx.helper.set_model_props(graph, {ADAPTERS: json.dumps(backbone.adapters)})
    return graph, source.from_file


def adapter_record(graph: onnx.ModelProto) -> list[dict]:
    """The adapters a fused step holds (`linear`'s records): each projection group's modules and the names of the
    initializers holding its A (8-bit codes, `lora_a`, and scales, `lora_a_scales`; a step written before A was held
    so names only `lora_a`, its A^T in float32) and (B s)^T; empty for a step without adapters."""
    props = {prop.key: prop.value for prop in graph.metadata_props}
    return json.loads(props[ADAPTERS]) if ADAPTERS in props else []


def check_io(graph: onnx.ModelProto, declared: kinds.GraphIO) -> None:
    """ExportError unless the written step takes and returns what the kind declares (names, order, types): the
    backends bind it by that declaration."""
    def written(values) -> list[tuple[str, int]]:
        return [(v.name, v.type.tensor_type.elem_type) for v in values]

    def expected(values) -> list[tuple[str, int]]:
        return [(t.name, ELEMENT_TYPES[t.dtype]) for t in values]

    if (written(graph.graph.input), written(graph.graph.output)) != (expected(declared.inputs),
                                                                     expected(declared.outputs)):
        raise ExportError("the fused step's inputs and outputs are not the ones its kind declares")
