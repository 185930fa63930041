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
from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec

VOCAB = 400


def model(vocab: int = VOCAB, **frame) -> LlamaHierEncDec:
    return random_model(lambda: LlamaHierEncDec(tiny_llama_config(vocab, **frame)))


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


def test_steps_with_reordered_beams_equal_teacher_forcing_of_their_sequences():
    """K beams of B items, reordered at random every step: each beam's step scores and document weights are the
    teacher-forced ones of the sequence it ends up with, its cache read from the slots where it was written."""
    net = model()
    ids, mask, unit_mask = documents([[9, 5, 7], [6, 8]], 9, seed=4)
    batch, units, length = ids.shape
    beams, steps = 3, 6
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        _, cross = net.encode(ids.view(-1, length), mask.view(-1, length))
        slots, source = BeamSlots(batch, beams, chunk=steps), None
        cache = net.model.empty_cache(batch, beams, steps)
        sequences = torch.randint(5, VOCAB, (batch, beams, 1), generator=g)
        scores, weights = [], []
        for t in range(steps):
            if t:
                source = torch.randint(0, beams, (batch, beams), generator=g)
                sequences = torch.cat([sequences.gather(1, source[..., None].expand_as(sequences)),
                                       torch.randint(5, VOCAB, (batch, beams, 1), generator=g)], dim=2)
                scores = [s.gather(1, source[..., None].expand_as(s)) for s in scores]
                weights = [w.gather(2, source[:, None].expand_as(w)) for w in weights]
            slots.advance(None if source is None else source.numpy())
            log_probs, step_weights = net.step(sequences[..., -1], unit_mask, mask.view(-1, length),
                                               torch.tensor([t]), torch.from_numpy(slots.slots), cache, cross)
            scores.append(log_probs)  # (B, K, V)
            weights.append(step_weights)  # (B, D, K)

        def per_beam(x):
            return x[:, None].expand(batch, beams, *x.shape[1:]).reshape(batch * beams, *x.shape[1:])

        expected, expected_weights = net(per_beam(ids), per_beam(mask), per_beam(unit_mask),
                                         sequences.view(batch * beams, steps))
    got = torch.stack(scores, dim=2).view(batch * beams, steps, -1)
    assert torch.allclose(got, expected, atol=1e-5)
    got_weights = torch.stack(weights, dim=3).permute(0, 2, 1, 3).reshape(batch * beams, units, steps)
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
    net = model(tokenizer.get_vocab_size(), **LLAMA_FRAME)
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
