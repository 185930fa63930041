"""The copy distribution (`model.copy = true`): its maths against a numpy reference, what the gate starts at, cached
steps equal teacher forcing, the exported step graph (a scatter of attention mass onto token ids) per step and token
for token against torch for PageSum and DYLE, and bundles written before the setting existed."""

import json
import random
import shutil

import numpy as np
import onnx
import pytest
import torch
from conftest import document, random_checkpoint, random_model, tiny_config
from test_export import compare_steps, random_units

from locsum_sdk import Summarizer, kinds
from locsum_sdk import constants as C
from locsum_sdk.backends.base import BeamSlots
from locsum_sdk.backends.onnxruntime import OnnxRuntimeBackend
from locsum_sdk.backends.torch import TorchBackend
from locsum_sdk.bundle import Bundle
from locsum_sdk.configs.hiersumm import HierSummConfig
from locsum_sdk.configs.model import step_shape
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.memory import estimate_memory
from locsum_sdk.modeling import copy
from locsum_sdk.modeling.checkpoint import load_checkpoint
from locsum_sdk.modeling.dyle import Dyle
from locsum_sdk.modeling.hierencdec import HierEncDec
from locsum_sdk.modeling.hiersumm import HierSumm
from locsum_sdk.modeling.pagesum import PageSum
from locsum_sdk.unit_batch import UnitBatch

KINDS = ("dyle", "hierencdec", "hiersumm", "pagesum")
UNITS = {"pagesum": {"policy": "spatial", "max_pages": 64, "page_tokens": 48},
         "dyle": {"policy": "auto", "snippet_tokens": 40, "top_k": 4, "chunk_tokens": 96},
         "hierencdec": {"policy": "document", "page_tokens": 48},
         "hiersumm": {"policy": "auto", "paragraph_tokens": 40, "top_paragraphs": 3}}


def build(kind: str, vocab: int, **config):
    """A tiny model of `kind` (random weights, `random_model`)."""
    if kind == "hiersumm":
        shape = HierSummConfig(vocab_size=vocab, d_model=32, encoder_heads=4, decoder_heads=4, encoder_ffn_dim=64,
                               decoder_ffn_dim=64, encoder_layers=("local", "global"), decoder_layers=2,
                               max_positions=128, ranker_hidden=16, **config)
        return random_model(lambda: HierSumm(shape))
    model = {"pagesum": PageSum, "dyle": Dyle, "hierencdec": HierEncDec}[kind]
    return random_model(lambda: model(tiny_config(vocab, **config)))


def encode(model, ids, mask, unit_mask):
    """The cross keys/values of units (B, U, L) as the kind's encoder takes them."""
    flat_ids, flat_mask = ids.view(-1, ids.shape[-1]), mask.view(-1, ids.shape[-1])
    if model.kind in ("pagesum", "dyle"):
        return model.encode(flat_ids, flat_mask)[1]
    if model.kind == "hierencdec":
        return model.encode(flat_ids, flat_mask, unit_mask)[1]
    return model.encode(flat_ids, flat_mask, unit_mask, torch.zeros(*unit_mask.shape, unit_mask.shape[1]))[1]


def reference_mixture(logits, share, mass, ids):
    """log(share * softmax(logits) + copy), the copy summed position by position (numpy, float64)."""
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs = probs / probs.sum(-1, keepdims=True) * share[..., None]
    for index in np.ndindex(*mass.shape):
        probs[(*index[:-1], ids[index])] += mass[index]
    return np.log(probs)


def mixture(logits, share, mass, ids):
    """log(share * softmax(logits) + copy) through `copy.with_copy`."""
    return copy.with_copy(torch.log_softmax(logits, -1) + copy.log_share(share), mass, ids)


def test_the_mixture_matches_its_reference_and_repeated_ids_add_up():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 50)).astype(np.float32)
    share = rng.uniform(0.2, 0.9, size=(2, 3)).astype(np.float32)
    attention = rng.dirichlet(np.ones(7), size=(2, 3)).astype(np.float32)
    mass = attention * (1 - share[..., None])
    ids = rng.integers(0, 5, size=(2, 3, 7))  # few ids: positions holding the same one add up
    got = mixture(*(torch.from_numpy(x) for x in (logits, share, mass, ids))).numpy()
    np.testing.assert_allclose(got, reference_mixture(logits, share, mass, ids), atol=1e-5)
    np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, atol=1e-5)
    b, q, s = 1, 2, 3
    assert np.exp(got[b, q, ids[b, q, s]]) >= mass[b, q][ids[b, q] == ids[b, q, s]].sum() - 1e-6


def test_an_unlikely_token_keeps_its_exact_log_probability_and_gradients_stay_finite():
    logits = torch.tensor([[0.0, -200.0, 5.0, -120.0]], requires_grad=True)
    share = torch.tensor([0.6], requires_grad=True)
    mass = torch.tensor([[0.3, 0.1, 0.0]], requires_grad=True)  # a position with no mass: nothing is copied there
    ids = torch.tensor([[2, 0, 1]])
    got = mixture(logits, share, mass, ids)
    expected = torch.log_softmax(logits.detach(), -1) + np.log(0.6)
    assert torch.allclose(got[0, [1, 3]], expected[0, [1, 3]])  # about -205 and -125: no copy, no underflow
    assert torch.allclose(got[0, 2].exp(), 0.6 * torch.softmax(logits.detach(), -1)[0, 2] + 0.3)
    got.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (logits, share, mass))


def copy_gate(model) -> copy.CopyGate:
    return model.copy_gate if model.kind == "hiersumm" else model.model.copy_gate


@pytest.mark.parametrize("kind", KINDS)
def test_the_gate_starts_near_its_initial_share_and_a_closed_gate_copies_only_the_input(kind):
    torch.manual_seed(0)
    model = build(kind, 300, copy=True)
    model.reset_parameters(0.02)
    gate = copy_gate(model)
    assert gate.proj.bias.item() == pytest.approx(copy.GATE_BIAS)
    ids, mask, unit_mask, dec = inputs(vocab=300)
    seen = {}
    handle = gate.register_forward_hook(lambda module, args, out: seen.update(gate=out))
    with torch.no_grad():
        model(ids, mask, unit_mask, dec)
    handle.remove()
    assert abs(seen["gate"].mean().item() - 0.7) < 0.03 and torch.allclose(seen["gate"], torch.tensor(0.7), atol=0.15)
    with torch.no_grad():
        gate.proj.weight.zero_()
        gate.proj.bias.fill_(-60.0)  # g = 0: every token comes from the input
        log_probs, _ = model(ids, mask, unit_mask, dec)
    for b in range(ids.shape[0]):
        source = torch.unique(ids[b][mask[b].bool() & unit_mask[b, :, None]])
        assert torch.allclose(log_probs[b][:, source].exp().sum(-1), torch.tensor(1.0), atol=1e-4)


def inputs(seed=0, vocab=400, batch=2, units=3, length=20, steps=7):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab // 4, (batch, units, length), generator=g)  # ids repeat within a unit
    mask = torch.ones_like(ids)
    mask[0, -1, 12:] = 0
    unit_mask = torch.ones(batch, units, dtype=torch.bool)
    unit_mask[1, -1] = False
    mask[1, -1] = 0
    return ids, mask, unit_mask, torch.randint(5, vocab, (batch, steps), generator=g)


@pytest.mark.parametrize("kind", KINDS)
def test_cached_steps_equal_teacher_forcing(kind):
    model = build(kind, 400, copy=True)
    ids, mask, unit_mask, dec = inputs()
    batch, units, length = ids.shape
    cfg = model.config
    with torch.no_grad():
        expected, expected_w = model(ids, mask, unit_mask, dec)
        cross = encode(model, ids, mask, unit_mask)
        steps = dec.shape[1]
        slots = BeamSlots(batch, 1, chunk=steps)
        cache = [tuple(torch.zeros(g, cfg.decoder_heads, 1, steps, cfg.head_dim) for _ in "kv")
                 for g in kinds.get(kind).layout.cache_groups(batch, units, step_shape(cfg.to_dict()))]
        for t in range(steps):
            slots.advance(None)
            log_probs, weights = model.step(dec[:, t : t + 1], unit_mask, mask.view(-1, length), torch.tensor([t]),
                                            torch.from_numpy(slots.slots), cache, cross, ids.view(-1, length))
            assert torch.allclose(log_probs[:, 0], expected[:, t], atol=1e-5)
            assert torch.allclose(weights[..., 0], expected_w[..., t], atol=1e-6)


@pytest.fixture(scope="module")
def copying(tmp_path_factory, tokenizer, tokenizer_file):
    """kind -> (checkpoint, bundle) of a random copying model of that kind."""
    out = {}
    for kind in KINDS:
        model = build(kind, tokenizer.get_vocab_size(), copy=True)
        checkpoint = random_checkpoint(model, tmp_path_factory.mktemp(f"{kind}-copy"), tokenizer_file, UNITS[kind])
        out[kind] = checkpoint, export_onnx(checkpoint, tmp_path_factory.mktemp("bundles") / kind).path
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_the_step_graph_reads_unit_tokens_and_scatters_attention_mass(copying, bundle_dir, kind):
    graph = onnx.load(str(copying[kind][1] / C.DECODER_FILE)).graph
    assert C.ENCODER_INPUT_IDS in [i.name for i in graph.input]
    scatters = [n for n in graph.node if n.op_type == "ScatterElements"]
    assert scatters and all(onnx.helper.get_node_attr_value(n, "reduction") == b"add" for n in scatters)
    plain = onnx.load(str(bundle_dir / C.DECODER_FILE)).graph  # a model without copy reads no unit tokens
    assert C.ENCODER_INPUT_IDS not in [i.name for i in plain.input]
    assert not [n for n in plain.node if n.op_type == "ScatterElements"]


@pytest.mark.parametrize("beams", [1, 3])
def test_every_pagesum_step_matches_torch(copying, tokenizer, beams):
    checkpoint, bundle = copying["pagesum"]
    rng = np.random.default_rng(beams)
    vocab = tokenizer.get_vocab_size()
    batch = UnitBatch.from_units([random_units(rng, 5, 40, vocab, vocab // 4),
                                  random_units(rng, 2, 40, vocab, vocab // 4)], pad=1)  # ids repeat: copies add up
    ort_session = OnnxRuntimeBackend(Bundle.load(bundle), threads=1).start(batch, beams, unit_batch_size=2)
    torch_session = TorchBackend(load_checkpoint(checkpoint).model).start(batch, beams, unit_batch_size=3)
    compare_steps(ort_session, torch_session, rng, vocab, beams, 8)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_beams", [1, 3])
def test_onnxruntime_matches_torch_token_for_token(copying, kind, num_beams):
    checkpoint, bundle = copying[kind]
    rng = random.Random(num_beams)
    inputs = [document(rng, 14), [document(rng, 4), document(rng, 3)]]
    queries = [None, "budget"]
    options = dict(num_beams=num_beams, max_length=12)
    ort = Summarizer.from_pretrained(bundle, threads=1).summarize_batch(inputs, queries, **options)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch").summarize_batch(inputs, queries, **options)
    for a, b in zip(ort, ref):
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)


def test_the_estimate_counts_the_scatter():
    model = {**tiny_config(8192, d_model=256).to_dict()}
    layout = kinds.get("pagesum").layout
    plain = estimate_memory(model, layout, 2, 16, 512, 4, 160, 4).decoder
    copying = estimate_memory({**model, "copy": True}, layout, 2, 16, 512, 4, 160, 4).decoder
    assert copying - plain >= 2 * 16 * 4 * 512 * 12  # every page's attention mass with its ids, per beam


def test_a_bundle_written_before_the_setting_reads_as_without_copy(bundle_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(bundle_dir, old)
    manifest = json.loads((old / C.MANIFEST_FILE).read_text())
    del manifest["model"]["copy"]
    (old / C.MANIFEST_FILE).write_text(json.dumps(manifest))
    text = document(random.Random(0), 6)
    assert Summarizer.from_pretrained(old).summarize(text).token_ids == \
        Summarizer.from_pretrained(bundle_dir).summarize(text).token_ids


@pytest.mark.parametrize("kind", KINDS)
def test_the_graphs_prepared_for_tensorrt_in_float16_follow_the_float32_ones(copying, kind, tmp_path):
    """A copying model's graphs through the TensorRT preparation (the plugins' ops, each beam's top tokens, --fp16),
    run on ONNX Runtime: every step finite, within 0.05 of float32 (log space: no copied-or-not token underflows
    in float16), the same greedy tokens."""
    from test_tensorrt import steps_in_both_precisions

    bundle = Bundle.load(copying[kind][1])
    rng = np.random.default_rng(0)
    vocab = bundle.manifest.model["vocab_size"]
    batch = UnitBatch.from_units([random_units(rng, 4, 40, vocab, vocab // 4),
                                  random_units(rng, 1, 40, vocab, vocab // 4)], pad=1)
    steps = steps_in_both_precisions(bundle, batch, tmp_path)
    for full, half in zip(steps["fp32"], steps["fp16"]):
        assert np.isfinite(half).all()
        assert np.abs(full - half).max() <= 0.05
        assert (full.argmax(-1) == half.argmax(-1)).all()


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
@pytest.mark.parametrize("kind", KINDS)
def test_copying_graphs_prepared_for_tensorrt_are_within_its_parser(copying, kind, fp16, tmp_path):
    """Every kind's copying graphs, not only the shipped bundles that copy, hold only what TensorRT's ONNX parser
    builds (no float64 cast from an exported isfinite, for one)."""
    from test_trt_graphs import parser_problems, prepared_graphs

    for graph, model in prepared_graphs(copying[kind][1], tmp_path, fp16):
        assert parser_problems(model) == [], f"{kind} {graph}"
