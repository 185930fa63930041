"""The fused decoding step (`modeling.fused_llama`, `modeling.fused_hierencdec`): block weights as MatMulNBits
reads them, taken code for code from a GGUF file, and HierEncDec's step on a Llama backbone written with ONNX
Runtime's fused operators, equal to the torch step.

Tolerances: with MatMulNBits computing in float32 (accuracy level 0) the graph is the torch maths on the same
block weights, so log-probabilities agree to 1e-4 and greedy choices exactly; at level 4 (int8 activations in blocks
of 32, what the CPU path runs) only closeness is asked, on weights small enough to be a real model's."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import LLAMA_FRAME, random_model, tiny_llama_config
from gguf_files import adapted_llm, write_gguf

from locsum_sdk import blockwise
from locsum_sdk import constants as C
from locsum_sdk.errors import BundleError, ExportError
from locsum_sdk.gguf_file import GGUFFile
from locsum_sdk.modeling.fused_llama import Projection, fused_step, linear
from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec
from locsum_sdk.modeling.llm_checkpoint import load_llm
from locsum_sdk.modeling.lora import LoRALinear
from locsum_sdk.modeling.onnx_builder import MS, GraphBuilder

VOCAB = 400
ROOT = Path(__file__).resolve().parents[1]


def matmul_nbits(weight: blockwise.BlockWeight, x: np.ndarray, accuracy: int = 0) -> np.ndarray:
    """x @ W^T through ONNX Runtime's MatMulNBits on the packed blocks and their zero points, where they have them
    (offsets not applied)."""
    n, k = weight.shape
    g = GraphBuilder("one")
    zero_points = [] if weight.zero_points is None else [g.const(weight.form("zero_points"))]
    g.op("MatMulNBits", "x", g.const(weight.packed()), g.const(weight.scales.reshape(-1)), *zero_points, domain=MS,
         K=k, N=n, bits=weight.bits, block_size=blockwise.BLOCK, accuracy_level=accuracy, name="y")
    model = g.model([("x", "float32", ["rows", k])], [("y", "float32", ["rows", n])])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("columns", [64, 48, 96])
def test_block_weights_run_in_matmul_nbits_as_numpy_reads_them(bits, columns):
    """Quantized here, 8-bit symmetric within half a step; 4-bit with a zero point per block (an odd number of
    blocks too: two zero points a byte) within what its shortest step clips, and as near as a float minimum per
    block would be (root mean square, within a tenth on these few blocks), and found again as they are when their
    values are quantized again; ONNX Runtime's product reads them as `values` does."""
    rng = np.random.default_rng(bits + columns)
    weight = rng.standard_normal((24, columns)).astype(np.float32)
    weight[0] = 0.3  # blocks of one value, and of one sign far from zero
    weight[1] = np.linspace(1.0, 1.1, columns)
    blocks = blockwise.quantize(weight, bits)
    error = blocks.values() - weight
    if bits == 8:
        assert np.abs(error).max() <= np.abs(weight).max() / 127 / 2 + 1e-6
    else:
        padded = np.pad(weight, ((0, 0), (0, -columns % 32))).reshape(24, -1, 32)  # as `quantize` pads
        reach = np.maximum(padded.max(-1), 0) - np.minimum(padded.min(-1), 0)  # the codes reach zero
        widest = 15 * (1 - min(blockwise.STRETCHES)) + 0.5  # a step shorter than the range's clips its ends
        assert np.all(np.abs(error) <= widest * np.repeat(reach / 15, 32, 1)[:, :columns] + 1e-6)
        assert np.abs(error[:2]).max() <= 1.1 / 15  # one-signed blocks: within a step of their largest value / 15
        assert blocks.zero_points.max() <= 15
        mixed = padded[2:]  # the random rows, each block of both signs
        low, step = mixed.min(-1, keepdims=True), np.ptp(mixed, -1, keepdims=True) / 15
        with_minimum = (np.rint((mixed - low) / step) * step + low).reshape(22, -1)[:, :columns] - weight[2:]
        assert np.sqrt(np.mean(error[2:] ** 2)) <= 1.1 * np.sqrt(np.mean(with_minimum ** 2))
        again = blockwise.quantize(blocks.values(), 4)  # what a rebuilt module's merged weight is exported as
        np.testing.assert_allclose(again.values(), blocks.values(), rtol=0, atol=1e-6 * np.abs(weight).max())
    x = rng.standard_normal((5, columns)).astype(np.float32)
    assert blocks.offsets is None and np.allclose(matmul_nbits(blocks, x), x @ blocks.values().T, atol=1e-4)


def with_minimum(weight: np.ndarray) -> blockwise.BlockWeight:
    """4-bit blocks with a float minimum each, as a Q4_1 file's: code 0 at the block's minimum, 15 at its maximum."""
    rows, columns = weight.shape
    blocks = weight.reshape(rows, -1, 32)
    low, step = blocks.min(-1), np.ptp(blocks, -1) / np.float32(15)
    codes = np.clip(np.rint((blocks - low[..., None]) / step[..., None]), 0, 15).astype(np.uint8)
    return blockwise.BlockWeight(codes.reshape(rows, columns), step.astype(np.float32),
                                 (low + 8 * step).astype(np.float32), 4)


@pytest.mark.parametrize("forms", [("minimum", 8, "minimum"), ("minimum", "minimum", "minimum"), ("minimum", 4, 8),
                                   (4, 4, 4)])
def test_a_projection_of_mixed_parts_is_their_products_side_by_side(forms):
    """Parts of one input in 4 bits with a float minimum (a Q4_1 file's, offsets beside the product), in 8 bits (its
    Q8_0 tensors) and in 4 bits with a zero point each (quantized here), mixed or of one form, with a bias and a LoRA
    update: the graph's projection is x @ W^T + bias + x A^T (B s)^T, part by part, A as the step holds it (8-bit
    blocks)."""
    rng = np.random.default_rng(2)
    weights = [rng.standard_normal((n, 64)).astype(np.float32) for n in (16, 8, 8)]
    parts = [with_minimum(weight) if form == "minimum" else blockwise.quantize(weight, form)
             for weight, form in zip(weights, forms)]
    bias = rng.standard_normal(32).astype(np.float32)
    lora_a, lora_b = rng.standard_normal((6, 64)).astype(np.float32), rng.standard_normal((32, 6)).astype(np.float32)
    g = GraphBuilder("projection")
    g.op("Identity", linear(g, "x", Projection(parts, bias, lora_a, lora_b), accuracy=0), name="y")
    model = g.model([("x", "float32", ["rows", 64])], [("y", "float32", ["rows", 32])])
    x = rng.standard_normal((3, 64)).astype(np.float32)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    weight = np.concatenate([part.values() for part in parts])
    held = blockwise.quantize(lora_a, 8).values()
    assert np.allclose(got, x @ weight.T + bias + (x @ held.T) @ lora_b.T, atol=1e-3)


def test_gguf_blocks_are_the_files_codes(tokenizer_file, tmp_path):
    path, config, _ = write_gguf(tmp_path / "tiny.gguf", tokenizer_file)
    reader = GGUFFile(path)
    kinds = set()
    for name, info in reader.tensors.items():
        if info.type not in blockwise.GGUF_TYPES:
            continue
        raw = np.fromfile(path, dtype=np.uint8, count=info.nbytes, offset=reader.data_start + info.offset)
        blocks = blockwise.from_gguf(raw, info.type, info.shape)
        assert np.array_equal(blocks.values(), reader.array(name)), name
        kinds.add(blockwise.GGUF_TYPES[info.type])
    assert kinds == {"Q4_1", "Q8_0"}
    with pytest.raises(BundleError, match="no block form"):
        blockwise.from_gguf(np.zeros(4, np.uint8), 0, (1, 1))


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "IQ4_NL", "IQ4_XS"])
def test_each_type_of_one_step_per_32_values_runs_its_own_codes(kind):
    """A tensor of each ggml type with one step (and at most one minimum) per 32 values: its blocks hold the file's
    codes (4-bit for Q4_*; 8-bit for Q5_* and Q8_0, and for IQ4_*, whose codes stand for 16 whole numbers of 8
    bits), their values are the file's to the float32 rounding of the offset (step * 8 + minimum, added once), and
    MatMulNBits over them plus the offsets' term is x @ W^T of the file's W."""
    import gguf
    from gguf_files import K_SCALES, random_blocks

    from locsum_sdk.ggml_blocks import LEVELS, affine, dequantize

    code = int(gguf.GGMLQuantizationType[kind])
    rng = np.random.default_rng(code)
    rows, columns = 6, 512
    if kind in K_SCALES:
        raw = random_blocks(kind, rows, columns, rng).reshape(-1)
    else:
        weight = rng.normal(0.0, 0.08, (rows, columns)).astype(np.float32)
        raw = gguf.quants.quantize(weight, gguf.GGMLQuantizationType[kind]).reshape(-1)
    expected = dequantize(raw, code, rows * columns).reshape(rows, columns)
    blocks = blockwise.from_gguf(raw, code, (rows, columns))
    parts = affine(raw, code, rows * columns)
    assert blocks.bits == (4 if kind.startswith("Q4") else 8)
    if blocks.bits == 4:
        assert np.array_equal(blocks.codes.reshape(-1), parts.codes.reshape(-1))  # the file's nibbles
    else:  # the file's 5- or 8-bit codes, centred as the file centres them
        assert np.array_equal(blocks.codes.astype(np.int16).reshape(-1) - blocks.centre,
                              parts.codes.astype(np.int16).reshape(-1) - parts.centre)
    if kind.startswith("IQ4"):  # every code one of the 16 levels
        assert set(np.unique(blocks.codes.astype(np.int16) - blocks.centre)) <= set(LEVELS.tolist())
    magnitude = float(np.abs(expected).max())
    np.testing.assert_allclose(blocks.values(), expected, rtol=0, atol=4 * np.finfo(np.float32).eps * magnitude)
    x = rng.standard_normal((3, columns)).astype(np.float32)
    offsets = 0 if blocks.offsets is None else x.reshape(3, -1, 32).sum(-1) @ blocks.offsets.T
    wanted = x @ expected.T
    np.testing.assert_allclose(matmul_nbits(blocks, x) + offsets, wanted, rtol=0,
                               atol=1e-5 * max(1.0, float(np.abs(wanted).max())))


def on_grid(shape: tuple[int, int], magnitude: float, rng: np.random.Generator) -> np.ndarray:
    """Float32 weights that 4-bit blocks with zero points hold exactly: step * (code - zero point), each block's
    codes running from 0 to 15, so that quantizing them again finds the same codes."""
    rows, columns = shape
    blocks = -(-columns // 32)  # a last block of fewer columns is padded with zeros, code `zeros`, when quantized
    codes = rng.integers(0, 16, (rows, blocks, 32))
    codes[..., 0], codes[..., 1] = 0, 15
    zeros = rng.integers(0, 16, (rows, blocks, 1))
    steps = (magnitude / 8 * rng.uniform(0.5, 1.5, (rows, blocks, 1))).astype(np.float32)
    return ((codes - zeros).astype(np.float32) * steps).reshape(rows, -1)[:, :columns]


def block_rounded(net: LlamaHierEncDec, lora_scale: float = 0.3, merge: bool = True) -> LlamaHierEncDec:
    """`net` with nonzero adapters, the adapters' A and the embedding on 8-bit block weights' values, and every
    projection such that the fused graph's blocks hold exactly the torch module's weights: on the 4-bit grid, or,
    where `merge` (the step adds each adapter into its weight before quantizing it), its weight plus adapter on it."""
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for name, parameter in net.named_parameters():
            if "lora_b" in name:
                parameter.copy_(torch.randn_like(parameter) * lora_scale)
            if "lora_a" in name:
                parameter.copy_(torch.from_numpy(blockwise.quantize(parameter.numpy(), 8).values()))
        for module in net.model.layers.modules():
            if isinstance(module, torch.nn.Linear):
                weight = on_grid(tuple(module.weight.shape), float(module.weight.abs().max()), rng)
                if merge and isinstance(module, LoRALinear):
                    weight = weight - (module.lora_b * module.scaling @ module.lora_a).numpy()
                module.weight.copy_(torch.from_numpy(weight))
        embedding = net.model.embed_tokens.weight
        embedding.copy_(torch.from_numpy(blockwise.quantize(embedding.numpy(), 8).values()))
    return net


def documents(net: LlamaHierEncDec):
    """2 items of up to 3 documents of 9 tokens (one padding document, padded tails) encoded by `net` -> (the
    generator the steps' tokens go on drawing from, the grid's token mask, the unit mask, every layer's cross)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (6, 9), generator=g)
    mask = torch.ones(6, 9, dtype=torch.long)
    mask[1, 6:], mask[4, 3:], mask[5, :] = 0, 0, 0
    unit_mask = torch.tensor([[True, True, True], [True, True, False]])
    with torch.no_grad():
        _, cross = net.encode(ids, mask)
    return g, mask, unit_mask, cross


def run_steps(net: LlamaHierEncDec, accuracy: int, steps: int = 5, beams: int = 2, gguf: GGUFFile | None = None,
              merge: bool = True):
    """Decode `steps` positions of 2 items of up to 3 documents (one padding document, padded tails) with beams
    whose histories cross, in torch and in the fused graph -> per step (torch log-probs, graph log-probs, torch
    weights, graph weights), and the largest cache difference."""
    graph, _ = fused_step(net, gguf, accuracy=accuracy, merge=merge)
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    cfg = net.config
    items, capacity = 2, steps + 1
    g, mask, unit_mask, cross = documents(net)
    shape = (items, cfg.kv_heads, beams, capacity, cfg.head_dim)
    cache = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(cfg.layers)]
    graph_cache = [(np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for _ in range(cfg.layers)]
    slots = -np.ones((items, beams, capacity), np.int64)
    results, worst = [], 0.0
    for position in range(steps):
        tokens = torch.randint(5, VOCAB, (items, beams), generator=g)
        slots[:, :, position] = np.arange(beams)
        if position >= 2:
            slots[:, 1, :position] = 0  # beam 1 continues beam 0's history
        with torch.no_grad():
            log_probs, weights = net.step(tokens, unit_mask, mask, torch.tensor([position]), torch.from_numpy(slots),
                                          cache, cross)
        feeds = {C.INPUT_IDS: tokens.numpy(), C.UNIT_MASK: unit_mask.numpy(), C.ENCODER_ATTENTION_MASK: mask.numpy(),
                 C.POSITION: np.array([position]), C.CACHE_SLOTS: slots.copy()}
        for i in range(cfg.layers):
            feeds[C.past_key(i)], feeds[C.past_value(i)] = graph_cache[i]
            feeds[C.cross_key(i)], feeds[C.cross_value(i)] = cross[i][0].numpy(), cross[i][1].numpy()
        outputs = dict(zip(names, session.run(None, feeds)))
        for i in range(cfg.layers):
            graph_cache[i] = (outputs[C.present_key(i)], outputs[C.present_value(i)])
            worst = max(worst, float(np.abs(graph_cache[i][0] - cache[i][0].numpy()).max()),
                        float(np.abs(graph_cache[i][1] - cache[i][1].numpy()).max()))
        results.append((log_probs.numpy(), outputs[C.LOG_PROBS], weights.numpy(), outputs[C.UNIT_WEIGHTS]))
    return results, worst


def tiny(std: float = 0.3, merge: bool = True) -> LlamaHierEncDec:
    config = tiny_llama_config(VOCAB, lora_rank=4, lora_alpha=8.0, **LLAMA_FRAME)
    return block_rounded(random_model(lambda: LlamaHierEncDec(config), std=std), merge=merge)


@pytest.mark.parametrize("merge", [True, False])
def test_the_fused_step_is_the_torch_step(merge):
    """Adapters merged into the weights quantized here (each projection one product), or kept beside them (an
    8-bit product of A and a Gemm): the step is the torch step either way."""
    graph, _ = fused_step(tiny(merge=merge), accuracy=0, merge=merge)
    # the IR version its opsets need, not the installed onnx's newest (which older ONNX Runtimes refuse)
    assert graph.ir_version == onnx.helper.find_min_ir_version_for(graph.opset_import, ignore_unknown=True) == 8
    beside = sum(node.op_type == "Gemm" for node in graph.graph.node)
    assert beside == (0 if merge else 4 * tiny().config.layers)
    results, cache_difference = run_steps(tiny(merge=merge), accuracy=0, merge=merge)
    for expected, got, expected_weights, got_weights in results:
        assert np.abs(got - expected).max() < 1e-4
        assert np.array_equal(got.argmax(-1), expected.argmax(-1))
        assert np.abs(got_weights - expected_weights).max() < 1e-5
    assert cache_difference < 1e-4


def test_the_fused_step_at_int8_compute_stays_close():
    results, _ = run_steps(tiny(std=0.05), accuracy=4)
    for expected, got, expected_weights, got_weights in results:
        assert np.abs(np.exp(got) - np.exp(expected)).max() < 0.02
        assert np.abs(got_weights - expected_weights).max() < 0.02


def projections(graph: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The step's `MatMulNBits` of the projections' own weights (not those of x with the block sums and adapters'
    A, whose product is a Gemm's first input)."""
    beside = {node.input[0] for node in graph.graph.node if node.op_type == "Gemm"}
    return [node for node in graph.graph.node if node.op_type == "MatMulNBits" and node.output[0] not in beside]


def test_the_fused_step_of_a_gguf_model_runs_the_files_blocks(tokenizer_file, tmp_path):
    path, _, _ = write_gguf(tmp_path / "tiny.gguf", tokenizer_file)
    net = load_llm(path).model.eval()
    graph, from_file = fused_step(net, GGUFFile(path), accuracy=0)
    layers = net.config.layers
    assert len(from_file) == 7 * layers + 1  # every projection of every layer, and the embedding (the tied head)
    assert len(projections(graph)) == 4 * layers + 1
    with torch.no_grad():  # a fine-tuned projection is no longer the file's: its blocks are quantized from it
        net.model.layers[0].self_attn.q_proj.weight.add_(0.01)
    assert len(fused_step(net, GGUFFile(path), accuracy=0)[1]) == 7 * layers


def test_a_4_bit_embedding_is_read_and_used_as_the_head_from_its_blocks(tokenizer_file, tmp_path):
    """A file whose token embedding is Q4_1 (codes unpacked in the graph, offsets added to the looked-up rows and
    to the tied head's logits): the step is the torch step on the file's weights."""
    path, _, _ = write_gguf(tmp_path / "tiny.gguf", tokenizer_file, embedding="Q4_1")
    net = load_llm(path).model.eval()
    assert len(fused_step(net, GGUFFile(path), accuracy=0)[1]) == 7 * net.config.layers + 1
    results, _ = run_steps(net, accuracy=0, gguf=GGUFFile(path))
    for expected, got, _, _ in results:
        assert np.abs(got - expected).max() < 1e-4


K_M = {**{role: "Q4_K" for role in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up")}, "attn_v": "Q5_K",
       "ffn_down": "Q6_K"}  # a `Q4_K_M` file's mix: Q4_K, with Q5_K and Q6_K where more bits matter


def test_a_k_quant_files_blocks_run_code_for_code_and_its_sixteens_in_8_bits(tokenizer_file, tmp_path):
    """A file of Q4_K and Q5_K projections: every one is taken from the file code for code, and the step is the
    torch step on the file's weights; its Q6_K projections (sub-blocks of 16, which no block of 32 holds) run as
    8-bit blocks quantized from the file's values, not 4-bit."""
    exact = {**K_M, "ffn_down": "Q4_K"}
    path, _, _ = write_gguf(tmp_path / "k.gguf", tokenizer_file, d_model=256, ffn_dim=256, projections=exact)
    net = load_llm(path).model.eval()
    layers = net.config.layers
    assert len(fused_step(net, GGUFFile(path), accuracy=0)[1]) == 7 * layers + 1
    results, _ = run_steps(net, accuracy=0, gguf=GGUFFile(path))
    for expected, got, _, _ in results:
        assert np.abs(got - expected).max() < 1e-4
    path, _, _ = write_gguf(tmp_path / "k_m.gguf", tokenizer_file, d_model=256, ffn_dim=256, projections=K_M)
    net = load_llm(path).model.eval()
    graph, from_file = fused_step(net, GGUFFile(path), accuracy=0)
    assert len(from_file) == 6 * layers + 1 and not [name for name in from_file if "down_proj" in name]
    bits = [next(a.i for a in node.attribute if a.name == "bits") for node in projections(graph)]
    assert bits.count(8) == 2 * layers + 1, bits  # each layer's value (Q5_K) and down (Q6_K), the Q8_0 head


IQ4 = {**{role: "IQ4_XS" for role in K_M}, "attn_v": "IQ4_NL"}  # an `IQ4_XS` file's mix


def test_an_iq4_files_blocks_run_code_for_code_in_8_bits(tokenizer_file, tmp_path):
    """A file of IQ4_XS projections, its value projections IQ4_NL (as llama-quantize writes a tensor whose rows are
    not whole 256s): every projection is taken from the file, as 8-bit codes (the 16 levels are whole numbers from
    -127 to 113), and the step is the torch step on the file's weights."""
    path, _, _ = write_gguf(tmp_path / "iq4.gguf", tokenizer_file, d_model=256, ffn_dim=256, projections=IQ4)
    net = load_llm(path).model.eval()
    layers = net.config.layers
    graph, from_file = fused_step(net, GGUFFile(path), accuracy=0)
    assert len(from_file) == 7 * layers + 1
    bits = [next(a.i for a in node.attribute if a.name == "bits") for node in projections(graph)]
    assert bits.count(8) == 4 * layers + 1 and bits.count(4) == 0, bits  # qkv, output, gate-up, down; the head
    results, _ = run_steps(net, accuracy=0, gguf=GGUFFile(path))
    for expected, got, _, _ in results:
        assert np.abs(got - expected).max() < 1e-4


def test_a_kind_without_a_fused_step_is_refused():
    from locsum_sdk.modeling.pagesum import PageSum

    net = random_model(lambda: PageSum(tiny_llama_config(VOCAB, **LLAMA_FRAME)))
    with pytest.raises(ExportError, match="no fused step is written for 'pagesum'"):
        fused_step(net)


def test_a_bundle_with_the_fused_step_assembles_the_files_blocks(tokenizer_file, tmp_path, monkeypatch):
    """A HierEncDec fine-tuned from a GGUF (adapters added) exported with quantize="blocks": the decoder is the fused
    step, its projections' codes and scales are recipes over the file's blocks (the bundle carries the adapters and
    norms only), base.bin is assembled from the file on load, and the bundle summarizes with the same tokens as
    the graph before it was split into bundle and recipes."""
    import json

    from locsum_sdk import Summarizer
    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.checkpoint import save_checkpoint

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # wide enough that every block form is over the size below which an initializer stays in its graph
    path, _, _ = write_gguf(tmp_path / "tiny.gguf", tokenizer_file, d_model=256, ffn_dim=512)
    loaded, net = adapted_llm(path)
    saved = save_checkpoint(net, tmp_path / "tuned", loaded.tokenizer_file)
    bundle = export_onnx(saved, tmp_path / "bundle", quantize="blocks", model_files=[path])
    manifest = json.loads((bundle.path / C.MANIFEST_FILE).read_text())
    assert manifest["dtype"] == "blocks"
    forms = [t.get("block") for t in manifest["base"]["tensors"]]
    layers = net.config.layers
    assert forms.count("codes") == 7 * layers + 1 and forms.count("scales") == 7 * layers + 1
    assert forms.count("offsets") == 7 * layers  # the Q4_1 projections; the Q8_0 embedding has none
    decoder = onnx.load(str(bundle.file(C.DECODER_FILE)), load_external_data=False)
    assert {"MatMulNBits", "SkipSimplifiedLayerNormalization"} <= {node.op_type for node in decoder.graph.node}
    encoder = onnx.load(str(bundle.file(C.ENCODER_FILE)), load_external_data=False)
    assert sum(node.op_type == "GroupQueryAttention" for node in encoder.graph.node) == layers  # `unit_attention`
    # one call a run: a slot-step bundle may run on CUDA, where the chunks' Scan would encode a run's units in turn
    text = "The roof leaks. The budget is short. " * 20
    options = {"max_length": 12, "min_length": 12, "whole_sentences": False}
    first = Summarizer.from_pretrained(bundle.path, threads=1).summarize(text, **options)
    again = Summarizer.from_pretrained(bundle.path, threads=1).summarize(text, **options)
    assert first.token_ids == again.token_ids and 0 < len(first.token_ids) <= 12
    assert np.isfinite(manifest["graphs"]["decoder"]["int8_max_abs_diff"])  # its difference from torch, recorded


def test_blocks_are_refused_for_a_kind_without_a_fused_step(llama_checkpoint_dir, tmp_path):
    from locsum_sdk.exporters.onnx import export_onnx

    with pytest.raises(ExportError, match="no fused step is written for 'pagesum'"):
        export_onnx(llama_checkpoint_dir, tmp_path / "bundle", quantize="blocks")
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize(("projections", "from_file"), [("Q4_1", 7 * 2 + 1), (K_M, 6 * 2 + 1), (IQ4, 7 * 2 + 1)],
                         ids=["Q4_1", "K_M", "IQ4"])
def test_an_llm_exports_zero_shot_with_the_fused_step_over_its_own_file(projections, from_file, tokenizer_file,
                                                                        tmp_path, monkeypatch):
    """A user's GGUF exported as it is (`locsum export --checkpoint model.gguf --quantize blocks`): the recipes name
    the user's file, and its blocks run (a `_K_M` file's Q4_K and Q5_K blocks too, its Q6_K ones the bundle's own
    8-bit blocks; an `IQ4_XS` file's blocks as 8-bit codes)."""
    import json

    from locsum_sdk import Summarizer
    from locsum_sdk.exporters.onnx import export_onnx

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path, _, _ = write_gguf(tmp_path / "model.gguf", tokenizer_file, d_model=256, ffn_dim=512,
                            projections=projections)
    bundle = export_onnx(path, tmp_path / "bundle", quantize="blocks")
    manifest = json.loads((bundle.path / C.MANIFEST_FILE).read_text())
    assert [source["file"] for source in manifest["base"]["sources"]] == [path.name]
    assert sum(1 for t in manifest["base"]["tensors"] if t.get("block") == "codes") == from_file
    summary = Summarizer.from_pretrained(bundle.path, threads=1).summarize("The roof leaks. " * 30, max_length=6)
    assert 0 < len(summary.token_ids) <= 6


def test_a_step_whose_io_is_not_its_kinds_is_refused():
    from locsum_sdk import kinds
    from locsum_sdk.modeling.fused_llama import check_io

    net = tiny()
    graph, _ = fused_step(net, accuracy=0)
    declared = kinds.get("hierencdec").graphs(net.config.to_dict())["decoder"]
    check_io(graph, declared)
    del graph.graph.output[-1]
    with pytest.raises(ExportError, match="not the ones its kind declares"):
        check_io(graph, declared)
