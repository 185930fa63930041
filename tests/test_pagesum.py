"""PageSum maths in torch: cached steps == teacher forcing, padding pages change nothing, one page == BART."""

import torch
from conftest import random_pagesum

from locsum_sdk.backends.base import BeamSlots
from locsum_sdk.modeling.bart import attention_bias

VOCAB = 400


def inputs(seed=0, batch=2, units=3, length=20, steps=7):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, units, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, -1, 12:] = 0
    unit_mask = torch.ones(batch, units, dtype=torch.bool)
    unit_mask[1, -1] = units == 1
    return ids, mask, unit_mask, torch.randint(5, VOCAB, (batch, steps), generator=g)


def empty_cache(model, batch, units, beams, capacity):
    """Slot caches of every layer: layer 0 per item, the others per page."""
    cfg = model.config
    groups = [batch] + [batch * units] * (cfg.decoder_layers - 1)
    return [tuple(torch.zeros(g, cfg.decoder_heads, beams, capacity, cfg.head_dim) for _ in "kv") for g in groups]


def test_cached_steps_equal_teacher_forcing():
    model = random_pagesum(VOCAB)
    ids, mask, unit_mask, dec = inputs()
    batch, units, length = ids.shape
    with torch.no_grad():
        expected, expected_w = model(ids, mask, unit_mask, dec)
        _, cross = model.encode(ids.view(-1, length), mask.view(-1, length))
        slots, cache = BeamSlots(batch, 1, chunk=dec.shape[1]), empty_cache(model, batch, units, 1, dec.shape[1])
        for t in range(dec.shape[1]):
            slots.advance(None)
            log_probs, weights = model.step(dec[:, t : t + 1], unit_mask, mask.view(-1, length), torch.tensor([t]),
                                            torch.from_numpy(slots.slots), cache, cross)
            assert torch.allclose(log_probs[:, 0], expected[:, t], atol=1e-5)
            assert torch.allclose(weights[..., 0], expected_w[..., t], atol=1e-6)


def test_reordered_beams_equal_teacher_forcing_of_their_sequences():
    """K beams of B items over U pages, reordered at random every step: each beam's step scores are the teacher-
    forced scores of the sequence it ends up with (the layer-0 cache is per item, the others per page), though the
    cache never moves: each beam reads its history from the slots where it was written."""
    model = random_pagesum(VOCAB)
    ids, mask, unit_mask, _ = inputs(3)
    batch, units, length = ids.shape
    beams, steps = 3, 6
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        _, cross = model.encode(ids.view(-1, length), mask.view(-1, length))
        slots, source = BeamSlots(batch, beams, chunk=steps), None
        cache = empty_cache(model, batch, units, beams, steps)
        sequences = torch.randint(5, VOCAB, (batch, beams, 1), generator=g)
        scores = []
        for t in range(steps):
            if t:
                source = torch.randint(0, beams, (batch, beams), generator=g)
                sequences = torch.cat([sequences.gather(1, source[..., None].expand_as(sequences)),
                                       torch.randint(5, VOCAB, (batch, beams, 1), generator=g)], dim=2)
                scores = [s.gather(1, source[..., None].expand_as(s)) for s in scores]
            slots.advance(None if source is None else source.numpy())
            log_probs, _ = model.step(sequences[..., -1], unit_mask, mask.view(-1, length), torch.tensor([t]),
                                      torch.from_numpy(slots.slots), cache, cross)
            scores.append(log_probs)  # (B, K, V)

        def per_beam(x):
            return x[:, None].expand(batch, beams, *x.shape[1:]).reshape(batch * beams, *x.shape[1:])

        expected, _ = model(per_beam(ids), per_beam(mask), per_beam(unit_mask), sequences.view(batch * beams, steps))
    got = torch.stack(scores, dim=2).view(batch * beams, steps, -1)
    assert torch.allclose(got, expected, atol=1e-5)


def test_the_shared_first_layer_equals_running_it_per_page():
    model = random_pagesum(VOCAB)
    ids, mask, unit_mask, dec = inputs(5)
    batch, units, length = ids.shape
    with torch.no_grad():
        got, _ = model(ids, mask, unit_mask, dec)
        _, cross = model.encode(ids.view(-1, length), mask.view(-1, length))
        per_page = dec[:, None].expand(batch, units, dec.shape[1]).reshape(batch * units, -1)
        hidden = model.model.decoder(per_page, cross, attention_bias(mask.view(-1, length), torch.float32))
        expected, _ = model.mix(hidden.view(batch, units, dec.shape[1], -1), unit_mask)
    assert torch.allclose(got, expected, atol=1e-6)


def test_a_padding_page_changes_nothing():
    model = random_pagesum(VOCAB)
    ids, mask, unit_mask, dec = inputs(1)
    garbage = torch.randint(5, VOCAB, (2, 1, ids.shape[2]))
    padded = (torch.cat([ids, garbage], 1), torch.cat([mask, torch.ones_like(garbage)], 1),
              torch.cat([unit_mask, torch.zeros(2, 1, dtype=torch.bool)], 1))
    with torch.no_grad():
        expected, weights = model(ids, mask, unit_mask, dec)
        got, padded_weights = model(*padded, dec)
    assert torch.equal(got, expected)
    assert torch.equal(padded_weights[:, :3], weights) and torch.all(padded_weights[:, 3] == 0)


def test_one_page_is_plain_bart():
    model = random_pagesum(VOCAB)
    ids, mask, _, dec = inputs(2, units=1)
    with torch.no_grad():
        got, weights = model(ids, mask, torch.ones(2, 1, dtype=torch.bool), dec)
        memory = model.model.encoder(ids[:, 0], mask[:, 0])
        hidden = model.model.decoder(dec, model.model.cross_kv(memory), attention_bias(mask[:, 0], memory.dtype))
        expected = torch.log_softmax(model.model.lm_logits(hidden), -1)
    assert torch.allclose(got, expected, atol=1e-6) and torch.all(weights == 1)
