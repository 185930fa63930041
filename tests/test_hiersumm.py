"""The Hierarchical Transformer's encoder-decoder: cached decoding steps equal teacher forcing, unit weights are
the attention mass per paragraph, padding paragraphs change nothing, configs round-trip."""

import pytest
import torch

from locsum_sdk.backends.base import BeamSlots
from locsum_sdk.errors import BundleError
from locsum_sdk.modeling.hiersumm import HierSumm
from locsum_sdk.modeling.hiersumm_config import HierSummConfig

CONFIG = HierSummConfig(vocab_size=60, d_model=16, encoder_heads=4, decoder_heads=4, encoder_ffn_dim=32,
                        decoder_ffn_dim=32, encoder_layers=("local", "global", "local"), decoder_layers=2,
                        max_positions=64, ranker_hidden=8, dropout=0.0)


def model(seed=0):
    torch.manual_seed(seed)
    m = HierSumm(CONFIG)
    m.reset_parameters(0.3)
    return m.eval()


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 60, (2, 3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 1, 5:] = 0
    units = torch.tensor([[True, True, True], [True, True, False]])
    mask[1, 2] = 0
    graph = torch.rand(2, 3, 3, generator=g)
    target = torch.randint(3, 60, (2, 6), generator=g)
    return ids, mask, units, graph, target


def test_cached_steps_equal_teacher_forcing():
    m = model()
    ids, mask, units, graph, target = batch()
    with torch.no_grad():
        log_probs, weights = m(ids, mask, units, target, graph)
        _, cross = m.encode(ids.reshape(6, 7), mask.reshape(6, 7), units, graph)
        slots = BeamSlots(2, 1)
        cache = [tuple(torch.zeros(2, 4, 1, slots.capacity, 4) for _ in "kv") for _ in range(2)]
        for t in range(6):
            slots.advance(None)
            step, step_weights = m.step(target[:, t : t + 1], units, mask.reshape(6, 7), torch.tensor([t]),
                                        torch.from_numpy(slots.slots), cache, cross)
            assert torch.allclose(step[:, 0], log_probs[:, t], atol=1e-5)
            assert torch.allclose(step_weights[..., 0], weights[..., t], atol=1e-6)


def test_unit_weights_are_the_attention_mass_per_paragraph():
    m = model()
    ids, mask, units, graph, target = batch()
    with torch.no_grad():
        _, weights = m(ids, mask, units, target, graph)
    assert weights.shape == (2, 3, 6) and torch.allclose(weights.sum(1), torch.ones(2, 6), atol=1e-5)
    assert torch.all(weights[1, 2] == 0)  # the padding paragraph


def test_a_padding_paragraph_changes_nothing():
    m = model()
    ids, mask, units, graph, target = batch()
    with torch.no_grad():
        log_probs, weights = m(ids[1:, :2], mask[1:, :2], units[1:, :2], target[1:], graph[1:, :2, :2])
        padded, padded_weights = m(ids[1:], mask[1:], units[1:], target[1:], graph[1:])
    assert torch.allclose(padded, log_probs, atol=1e-5) and torch.allclose(padded_weights[:, :2], weights, atol=1e-6)


def test_the_config_round_trips_and_refuses_bad_layers():
    assert HierSummConfig.from_dict(CONFIG.to_dict()) == CONFIG
    assert HierSummConfig().encoder_layers == ("local",) * 5 + ("global",) * 2 and HierSummConfig().encoder_heads == 8
    with pytest.raises(BundleError, match="encoder_layers"):
        HierSummConfig(encoder_layers=("local", "sideways"))
    with pytest.raises(BundleError, match="unknown"):
        HierSummConfig.from_dict({**CONFIG.to_dict(), "colour": 1})
