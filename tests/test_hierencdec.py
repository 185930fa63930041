"""HierEncDec modeling: the efficient encoder equals the dense-mask form; one document is plain BART; stepwise
decoding with the slot cache equals teacher forcing; padding and permuted documents behave as the maths says."""

import dataclasses

import pytest
import torch
from conftest import random_model, tiny_config

from locsum_sdk.modeling.hierencdec import HierEncDec, Parts

VOCAB = 60
ATOL = 1e-5


def model(seed: int = 0, parts: Parts | None = None) -> HierEncDec:
    return random_model(lambda: HierEncDec(tiny_config(VOCAB, max_positions=64), parts), seed)


def documents(seed: int = 0, batch: int = 2, docs: int = 3, length: int = 7):
    """A (B, D, L) grid of documents of uneven lengths, each starting with <s> (0); item 1 ends in a padding
    document."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (batch, docs, length), generator=g)
    ids[:, :, 0] = 0
    mask = torch.ones(batch, docs, length, dtype=torch.long)
    mask[0, -1, 4:] = 0  # a short document
    if batch > 1 and docs > 1:
        mask[1, -1] = 0  # padding document
    ids[mask == 0] = 1
    unit_mask = mask[:, :, 0].bool()
    return ids, mask, unit_mask


def real_rows(memory, mask):
    return memory.view(*mask.shape, -1)[mask.bool()]


@pytest.mark.parametrize("parts", [Parts(), Parts(restart_positions=False)])
def test_efficient_encoder_equals_the_dense_mask_form(parts):
    m = model(parts=parts)
    ids, mask, unit_mask = documents()
    rows = (ids.view(-1, ids.shape[-1]), mask.view(-1, mask.shape[-1]), unit_mask)
    with torch.no_grad():
        efficient, _ = m.encode(*rows)
        dense = m.dense_encode(*rows)
    torch.testing.assert_close(real_rows(efficient, mask), real_rows(dense, mask), atol=ATOL, rtol=0)


def test_one_document_is_plain_bart():
    m = model()
    ids, mask, _ = documents(1, docs=1)
    ids, mask = ids.view(-1, ids.shape[-1]), mask.view(-1, mask.shape[-1])
    with torch.no_grad():
        memory, _ = m.encode(ids, mask, torch.ones(2, 1, dtype=torch.bool))
        expected = m.model.encoder(ids, mask)  # BART's encoder with the same weights, no hierarchy
    torch.testing.assert_close(real_rows(memory, mask), real_rows(expected, mask), atol=ATOL, rtol=0)


def test_stepwise_decoding_equals_teacher_forcing():
    m = model(2)
    ids, mask, unit_mask = documents(2)
    batch, docs, length = ids.shape
    targets = torch.randint(4, VOCAB, (batch, 5), generator=torch.Generator().manual_seed(3))
    cfg = m.config
    with torch.no_grad():
        expected, expected_w = m(ids, mask, unit_mask, targets)
        _, cross = m.encode(ids.view(-1, length), mask.view(-1, length), unit_mask)
        cache = [tuple(torch.zeros(batch, cfg.decoder_heads, 1, 8, cfg.head_dim) for _ in "kv")
                 for _ in range(cfg.decoder_layers)]
        slots = torch.full((batch, 1, 8), -1)
        for t in range(targets.shape[1]):
            slots[:, :, t] = 0
            log_probs, weights = m.step(targets[:, t : t + 1], unit_mask, mask.view(-1, length), torch.tensor([t]),
                                        slots, cache, cross)
            torch.testing.assert_close(log_probs[:, 0], expected[:, t], atol=ATOL, rtol=0)
            torch.testing.assert_close(weights[..., 0], expected_w[..., t], atol=ATOL, rtol=0)
    assert torch.all(expected_w[1, -1] == 0)  # the padding document
    torch.testing.assert_close(expected_w.sum(1), torch.ones(batch, targets.shape[1]), atol=ATOL, rtol=0)


def test_permuted_documents_and_an_added_empty_document_change_nothing():
    m = model(4)
    ids, mask, unit_mask = documents(4, batch=1)
    targets = torch.randint(4, VOCAB, (1, 4), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        log_probs, weights = m(ids, mask, unit_mask, targets)
        order = torch.tensor([2, 0, 1])
        permuted, permuted_w = m(ids[:, order], mask[:, order], unit_mask[:, order], targets)
        pad = lambda t, value: torch.cat([t, torch.full_like(t[:, :1], value)], dim=1)  # noqa: E731
        padded, padded_w = m(pad(ids, 1), pad(mask, 0), pad(unit_mask, False), targets)
    torch.testing.assert_close(permuted, log_probs, atol=ATOL, rtol=0)
    torch.testing.assert_close(permuted_w, weights[:, order], atol=ATOL, rtol=0)
    torch.testing.assert_close(padded, log_probs, atol=ATOL, rtol=0)
    assert torch.all(padded_w[:, -1] == 0)


@pytest.mark.parametrize("parts", [Parts(hierarchical_encoder=False), Parts(document_scaled_attention=False),
                                   Parts(False, False, False)])
def test_ablations_run_and_their_weights_are_distributions(parts):
    m = model(6, parts)
    ids, mask, unit_mask = documents(6)
    targets = torch.randint(4, VOCAB, (2, 3), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        log_probs, weights = m(ids, mask, unit_mask, targets)
    assert torch.isfinite(log_probs).all()
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(2, 3), atol=1e-4, rtol=0)
    torch.testing.assert_close(weights.sum(1), torch.ones(2, 3), atol=1e-4, rtol=0)
    assert dataclasses.asdict(m.parts) == dataclasses.asdict(parts)
