"""HierEncDec on a Llama backbone: documents read alone as prompts, one summary per item reading all of them through
document-scaled attention. One document is the pretrained model itself; copies of one document, the documents'
order and padding change nothing; cached steps with reordered beams equal teacher forcing; the bundle runs on ONNX
Runtime token for token with torch."""

import json
import random

import numpy as np
import pytest
import torch
from conftest import LLAMA_FRAME, document, random_model, tiny_llama_config

from locsum_sdk import Summarizer
from locsum_sdk.backends.base import BeamSlots
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec, read_documents

VOCAB = 400


def model(vocab: int = VOCAB) -> LlamaHierEncDec:
    """A tiny random one whose documents' first two positions are the prompt's head (`LLAMA_FRAME`), which the
    document weights leave out."""
    return random_model(lambda: LlamaHierEncDec(tiny_llama_config(vocab, **LLAMA_FRAME)))


def documents(lengths: list[list[int]], width: int, seed: int = 0):
    """Items of documents of the given lengths -> ids, attention mask (B, D, width), unit mask (B, D)."""
    g = torch.Generator().manual_seed(seed)
    docs = max(len(item) for item in lengths)
    ids = torch.ones(len(lengths), docs, width, dtype=torch.long)
    mask, unit_mask = torch.zeros_like(ids), torch.zeros(len(lengths), docs, dtype=torch.bool)
    for b, item in enumerate(lengths):
        for d, n in enumerate(item):
            ids[b, d, :n] = torch.randint(5, VOCAB, (n,), generator=g)
            mask[b, d, :n], unit_mask[b, d] = 1, True
    return ids, mask, unit_mask


def test_one_document_reads_as_the_pretrained_model_reads_its_prompt():
    net = model()
    ids, mask, unit_mask = documents([[9], [6]], 9)
    summary = torch.randint(5, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        log_probs, weights = net(ids, mask, unit_mask, summary)
        for b, n in enumerate((9, 6)):
            whole = torch.log_softmax(net.model(torch.cat([ids[b, 0, :n], summary[b]])[None])[0, n:], -1)
            assert torch.allclose(log_probs[b], whole, atol=1e-5)
    assert torch.equal(weights, torch.ones_like(weights))


def test_copies_of_one_document_read_as_that_document():
    net = model()
    ids, mask, unit_mask = documents([[8]], 8, seed=2)
    copies = [t.expand(1, 3, *t.shape[2:]) for t in (ids, mask, unit_mask)]
    summary = torch.randint(5, VOCAB, (1, 4))
    with torch.no_grad():
        alone, _ = net(ids, mask, unit_mask, summary)
        three, weights = net(*copies, summary)
    assert torch.allclose(alone, three, atol=1e-5)
    assert torch.allclose(weights, torch.full_like(weights, 1 / 3), atol=1e-6)


def test_order_and_padding_of_documents_change_nothing():
    net = model()
    ids, mask, unit_mask = documents([[7, 4, 9]], 9, seed=3)
    summary = torch.randint(5, VOCAB, (1, 6))
    order = torch.tensor([2, 0, 1])
    wide = documents([[7, 4, 9, 3]], 12, seed=3)  # the same three, wider, and a padding document
    wide_ids, wide_mask = wide[0].clone(), wide[1].clone()
    wide_ids[0, :3, :9], wide_ids[0, :3, 9:], wide_mask[0, :3, 9:] = ids[0], 1, 0
    wide_unit_mask = torch.tensor([[True, True, True, False]])
    with torch.no_grad():
        expected, weights = net(ids, mask, unit_mask, summary)
        shuffled, shuffled_weights = net(ids[:, order], mask[:, order], unit_mask[:, order], summary)
        padded, padded_weights = net(wide_ids, wide_mask, wide_unit_mask, summary)
    assert torch.allclose(shuffled, expected, atol=1e-5) and torch.allclose(padded, expected, atol=1e-5)
    assert torch.allclose(shuffled_weights, weights[:, order], atol=1e-6)
    assert torch.allclose(padded_weights[:, :3], weights, atol=1e-6) and torch.all(padded_weights[:, 3] == 0)
    assert torch.allclose(weights.sum(1), torch.ones(1, 6), atol=1e-6) and weights.std() > 0.01


def test_the_document_weights_leave_out_the_prompts_head():
    """Two documents whose text draws the same attention weigh equally, however much more their prompt's head
    draws in one of them (an attention sink); with the head counted, that one would take nearly all the weight.
    Each document's reading still holds its head."""
    scores = torch.tensor([[8.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # document, position: position 0 is the head
    key_t = torch.zeros(1, 2, 1, 2, 3)
    key_t[0, :, 0, 0] = scores  # a query (1, 0) reads each position's first key dimension as its score
    value = torch.arange(12.0).view(1, 2, 1, 3, 2)
    q_docs = torch.tensor([1.0, 0.0]).expand(1, 2, 1, 1, 2)
    open_keys = torch.zeros(1, 2, 1, 1, 3)
    head = torch.tensor([torch.finfo(torch.float32).min, 0.0, 0.0]).expand(1, 2, 1, 1, 3)
    summary = (torch.zeros(1, 1, 2, 1), torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 1))
    real = torch.ones(1, 2, dtype=torch.bool)
    out, weights = read_documents(q_docs, (key_t, value, open_keys), head, real, q_docs[:, 0], summary, 1.0)
    _, counted = read_documents(q_docs, (key_t, value, open_keys), open_keys, real, q_docs[:, 0], summary, 1.0)
    assert torch.allclose(weights.flatten(), torch.tensor([0.5, 0.5]))
    assert counted.flatten()[0] > 0.99
    own = torch.softmax(scores, -1)  # each document's reading: its softmax over every position, head included
    readings = (own[:, :, None] * value[0, :, 0]).sum(1)  # (2, d)
    mass = torch.logsumexp(scores, -1)
    share = torch.sigmoid(mass)  # beside a summary of one position scoring 0 with value 0
    assert torch.allclose(out.flatten(), (0.5 * share[:, None] * readings).sum(0), atol=1e-6)


def test_steps_with_reordered_beams_equal_teacher_forcing_of_their_sequences():
    """K beams of B items, reordered at random every step: each beam's step scores and document weights are the
    teacher-forced ones of the sequence it ends up with, its cache read from the slots where it was written."""
    from test_pagesum import reordered_steps

    net = model()
    ids, mask, unit_mask = documents([[9, 5, 7], [6, 8]], 9, seed=4)
    cache = net.model.empty_cache(ids.shape[0], 3, 6)
    got, got_weights, expected, expected_weights = reordered_steps(net, ids, mask, unit_mask, cache, beams=3,
                                                                   steps=6, seed=5)
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(got_weights, expected_weights, atol=1e-6)


def test_half_precision_steps_run():
    net = model().to(torch.bfloat16)
    ids, mask, unit_mask = documents([[9, 5]], 9, seed=6)
    with torch.no_grad():
        _, cross = net.encode(ids.view(-1, 9), mask.view(-1, 9))
        cache = net.model.empty_cache(1, 2, 4)
        slots = BeamSlots(1, 2, chunk=4)
        slots.advance(None)
        log_probs, weights = net.step(torch.tensor([[5, 6]]), unit_mask, mask.view(-1, 9), torch.tensor([0]),
                                      torch.from_numpy(slots.slots), cache, cross)
    assert log_probs.dtype == torch.bfloat16 and torch.isfinite(log_probs.float()).all()
    assert torch.allclose(weights.float().sum(1), torch.ones(1, 2), atol=1e-2)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizer, tokenizer_file):
    net = model(tokenizer.get_vocab_size())
    return save_checkpoint(net, tmp_path_factory.mktemp("llama_hierencdec"), tokenizer_file,
                           units={"policy": "document", "page_tokens": 100},
                           generation={"num_beams": 1, "max_length": 16})


@pytest.mark.parametrize("num_beams", [1, 3])
def test_onnxruntime_matches_torch_token_for_token(checkpoint, tmp_path_factory, num_beams):
    bundle = tmp_path_factory.getbasetemp() / "llama_hierencdec_bundle"
    if not bundle.exists():
        export_onnx(checkpoint, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["kind"] == "hierencdec" and manifest["model"]["backbone"] == "llama"
    rng = random.Random(num_beams)
    inputs = [[document(rng, 4), document(rng, 6), document(rng, 3)], document(rng, 5), [document(rng, 2)] * 2]
    queries = ["What was decided?", None, "budget"]
    options = dict(num_beams=num_beams, max_length=12, min_length=4)
    ort = Summarizer.from_pretrained(bundle, threads=1).summarize_batch(inputs, queries, **options)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch").summarize_batch(inputs, queries, **options)
    for a, b in zip(ort, ref):
        assert a.token_ids == b.token_ids and a.kind == "hierencdec"
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)
    assert {u.document for u in ort[0].units} == {0, 1, 2} and {u.document for u in ort[2].units} == {0, 1}


def test_a_lora_run_from_the_base_model_trains_its_adapters_and_exports(tmp_path, tokenizer_file, monkeypatch):
    """`python -m train` with kind hierencdec from the base model's GGUF: the adapters train (the loss falls on the
    rows it sees), the pretrained weights stay, and the bundle of its changes summarizes."""
    pytest.importorskip("gguf")
    from conftest import training_rows, write_jsonl
    from gguf_files import write_gguf

    from locsum_sdk.modeling.checkpoint import load_checkpoint
    from locsum_sdk.modeling.lora import LoRALinear
    from train.__main__ import build
    from train.config import TrainConfig

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gguf_file = write_gguf(tmp_path / "tiny.gguf", tokenizer_file)[0]
    start = load_checkpoint(gguf_file, kind="hierencdec")
    base = save_checkpoint(start.model, tmp_path / "base", start.tokenizer_file)
    rows = [{**row, "documents": [row["documents"][0]] * 2} if len(row["documents"]) == 1 else row
            for row in training_rows(4)]
    config = TrainConfig(
        name="hierencdec-lora", objective="summarize", kind="hierencdec", init_from=str(base), model={},
        tokenizer=str(base / "tokenizer.json"), train_files=[str(write_jsonl(tmp_path / "train.jsonl", rows))],
        val_files=[], output=str(tmp_path), units={"policy": "document", "page_tokens": 200}, batch_size=2,
        grad_accum=1, max_steps=6, lr=2e-2, warmup_steps=1, max_target_tokens=16, log_every=1, eval_every=0,
        save_every=6, bf16=False, generation={"num_beams": 1, "max_length": 8}, lora={"rank": 4, "alpha": 8},
        trainable=["*.lora_a", "*.lora_b"])
    run = build(config, progress=False)
    log = run.train()
    assert all(np.isfinite(r["loss"]) for r in log) and log[-1]["loss"] < log[0]["loss"]
    trained = load_checkpoint(run.latest()).model
    assert trained.kind == "hierencdec" and any(m.lora_b.abs().max() > 0 for m in trained.modules()
                                                 if isinstance(m, LoRALinear))
    before = start.model.state_dict()
    assert all(torch.equal(t, before[n]) for n, t in trained.state_dict().items() if "lora_" not in n)
    bundle = export_onnx(run.latest(), tmp_path / "bundle", quantize="int8",
                         options={"max_length": 8, "keywords": 0, "known_words": False})
    summary = Summarizer.from_pretrained(bundle.path).summarize(["The board met on Monday.", "It approved a ramp."])
    assert summary.token_ids and len(summary.units) == 2
