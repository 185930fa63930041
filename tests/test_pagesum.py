"""PageSum maths in torch: cached steps == teacher forcing, padding pages change nothing, one page == BART."""

import pytest
import torch
from conftest import random_pagesum

from locsum_sdk.backends.base import BeamSlots
from locsum_sdk.backends.torch import generate_from_ids
from locsum_sdk.generation import GenerationOptions
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
    """Slot caches of every layer: per page, except BART's layer 0, per item."""
    cfg = model.config
    groups = [batch if model.model.shares_first_layer else batch * units] + [batch * units] * (cfg.decoder_layers - 1)
    return [tuple(torch.zeros(g, cfg.cache_heads, beams, capacity, cfg.head_dim) for _ in "kv") for g in groups]


def check_cached_steps(model):
    """Each cached step's log-probabilities and unit weights equal teacher forcing's at that position."""
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


@pytest.mark.parametrize("backbone", ["bart", "llama"])
def test_cached_steps_equal_teacher_forcing(backbone):
    check_cached_steps(random_pagesum(VOCAB, backbone=backbone))


def reordered_steps(model, ids, mask, unit_mask, cache, beams: int, steps: int, seed: int):
    """K beams of B items decoded `steps` steps against `cache`, reordered at random every step, and teacher forcing
    of the sequences they end up with: (step log-probabilities (B*K, T, V), step unit weights (B*K, U, T), teacher
    forcing's log-probabilities and unit weights)."""
    batch, units, length = ids.shape
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        _, cross = model.encode(ids.view(-1, length), mask.view(-1, length))
        slots, source = BeamSlots(batch, beams, chunk=steps), None
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
            log_probs, step_weights = model.step(sequences[..., -1], unit_mask, mask.view(-1, length),
                                                 torch.tensor([t]), torch.from_numpy(slots.slots), cache, cross)
            scores.append(log_probs)  # (B, K, V)
            weights.append(step_weights)  # (B, U, K)

        def per_beam(x):
            return x[:, None].expand(batch, beams, *x.shape[1:]).reshape(batch * beams, *x.shape[1:])

        expected, expected_weights = model(per_beam(ids), per_beam(mask), per_beam(unit_mask),
                                           sequences.view(batch * beams, steps))
    got = torch.stack(scores, dim=2).view(batch * beams, steps, -1)
    got_weights = torch.stack(weights, dim=3).permute(0, 2, 1, 3).reshape(batch * beams, units, steps)
    return got, got_weights, expected, expected_weights


@pytest.mark.parametrize("backbone", ["bart", "llama"])
def test_reordered_beams_equal_teacher_forcing_of_their_sequences(backbone):
    """K beams of B items over U pages, reordered at random every step: each beam's step scores are the teacher-
    forced scores of the sequence it ends up with (BART's layer-0 cache is per item, the others per page), though
    the cache never moves: each beam reads its history from the slots where it was written."""
    model = random_pagesum(VOCAB, backbone=backbone)
    ids, mask, unit_mask, _ = inputs(3)
    batch, units, _ = ids.shape
    cache = empty_cache(model, batch, units, 3, 6)
    got, _, expected, _ = reordered_steps(model, ids, mask, unit_mask, cache, beams=3, steps=6, seed=4)
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


def with_padding_page(ids, mask, unit_mask):
    """The inputs with one more page per item, of random tokens, that the unit mask marks as padding."""
    garbage = torch.randint(5, VOCAB, (ids.shape[0], 1, ids.shape[2]))
    return (torch.cat([ids, garbage], 1), torch.cat([mask, torch.ones_like(garbage)], 1),
            torch.cat([unit_mask, torch.zeros(ids.shape[0], 1, dtype=torch.bool)], 1))


def test_a_padding_page_changes_nothing():
    model = random_pagesum(VOCAB)
    ids, mask, unit_mask, dec = inputs(1)
    padded = with_padding_page(ids, mask, unit_mask)
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


@pytest.mark.parametrize("backbone", ["bart", "llama"])
def test_a_padding_page_changes_nothing_on_either_backbone(backbone):
    model = random_pagesum(VOCAB, backbone=backbone)
    ids, mask, unit_mask, dec = inputs(1)
    padded = with_padding_page(ids, mask, unit_mask)
    with torch.no_grad():
        expected, _ = model(ids, mask, unit_mask, dec)
        got, padded_weights = model(*padded, dec)
    assert torch.allclose(got, expected, atol=1e-6) and torch.all(padded_weights[:, 3] == 0)


def test_one_page_on_a_llama_is_the_language_model_continuing_it():
    model = random_pagesum(VOCAB, backbone="llama")
    ids, mask, _, dec = inputs(2, units=1)
    mask[:] = 1
    with torch.no_grad():
        got, _ = model(ids, mask, torch.ones(2, 1, dtype=torch.bool), dec)
        whole = torch.log_softmax(model.model(torch.cat([ids[:, 0], dec], 1)), -1)[:, ids.shape[2]:]
    assert torch.allclose(got, whole, atol=1e-5)


def test_the_torch_backend_decodes_a_llama_pagesum_as_teacher_forcing_chooses():
    """Greedy generation through the runtime's decoding loop and the torch backend (unit encodings in the grid, slot
    caches per page) picks, at every step, the argmax of the teacher-forced scores of the tokens before it."""
    model = random_pagesum(VOCAB, backbone="llama")
    g = torch.Generator().manual_seed(7)
    items = [[tuple(torch.randint(5, VOCAB, (n,), generator=g).tolist()) for n in sizes] for sizes in ((9, 4, 7), (6,))]
    steps = 6
    hypotheses = generate_from_ids(model, items, GenerationOptions(num_beams=1, max_length=steps + 1,
                                                                   min_length=steps + 1))
    start = model.config.decoder_start_token_id
    for item, hypothesis in zip(items, hypotheses):
        length = max(len(u) for u in item)
        ids = torch.tensor([list(u) + [1] * (length - len(u)) for u in item])[None]
        mask = torch.tensor([[1] * len(u) + [0] * (length - len(u)) for u in item])[None]
        tokens = [start]
        with torch.no_grad():
            for _ in range(steps):
                log_probs, _ = model(ids, mask, torch.ones(1, len(item), dtype=torch.bool), torch.tensor([tokens]))
                scores = log_probs[0, -1].clone()
                scores[model.config.eos_token_id] = -float("inf")  # min_length holds end-of-sequence back
                tokens.append(int(scores.argmax()))
        assert list(hypothesis.token_ids) == tokens[1:]
