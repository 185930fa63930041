"""The Hierarchical Transformer's encoder blocks against their formulas: multi-head pooling, the graph-informed
head, masking of padding tokens and empty paragraphs, the ablation switches."""

import dataclasses

import pytest
import torch

from locsum_sdk.errors import InputTooLongError
from locsum_sdk.modeling.hiersumm_encoder import (
    EncoderParts,
    GlobalLayer,
    HierarchicalEncoder,
    MultiHeadPooling,
    sinusoid,
)

DIM, HEADS = 16, 4


def encoder(parts=EncoderParts(), seed=0):
    torch.manual_seed(seed)
    embed = torch.nn.Embedding(50, DIM, padding_idx=1)
    model = HierarchicalEncoder(embed, ("local", "local", "global", "global"), HEADS, 32, 0.0, parts).eval()
    for p in model.parameters():  # LayerNorm weights off 1, biases off 0: every term counts
        torch.nn.init.normal_(p, std=0.3)
    return model


def grid(seed=1, batch=2, paragraphs=3, tokens=6):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 50, (batch, paragraphs, tokens), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 1, 4:] = 0
    mask[1, 2, 2:] = 0
    return ids, mask


def test_multi_head_pooling_is_a_softmax_over_each_paragraphs_tokens_per_head():
    torch.manual_seed(0)
    pooling = MultiHeadPooling(DIM, HEADS, 0.0).eval()
    x = torch.randn(3, 5, DIM)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    out = pooling(x, mask)
    for n in range(2):
        real = x[n, mask[n]]
        weights = torch.softmax(pooling.scores(real), dim=0)  # (T, H)
        values = pooling.values(real).view(-1, HEADS, DIM // HEADS)  # (T, H, d)
        assert torch.allclose(out[n], (weights[:, :, None] * values).sum(0), atol=1e-6)
    assert torch.all(out[2] == 0)  # an empty paragraph pools to nothing


def test_the_graph_head_follows_the_given_graph():
    torch.manual_seed(0)
    layer = GlobalLayer(DIM, HEADS, 32, 0.0).eval()
    pooled = torch.randn(1, 3, HEADS, DIM // HEADS)
    mask = torch.tensor([[True, True, False]])
    graph = torch.tensor([[[0.0, 2.0, 5.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]])
    context = layer.paragraph_attention(pooled, mask, graph)
    values = layer.v_proj(pooled[:, :, 0])  # head 0's values (1, 3, d)
    want = torch.stack([values[0, 1], (values[0, 0] + values[0, 1]) / 2, values[0, 0]])  # empty paragraph 2 dropped
    assert torch.allclose(context[0, :, 0], want, atol=1e-6)
    plain = layer.paragraph_attention(pooled, mask, None)
    assert torch.allclose(context[:, :, 1:], plain[:, :, 1:]) and not torch.allclose(context[:, :, 0], plain[:, :, 0])


def test_padding_tokens_and_empty_paragraphs_change_nothing():
    model = encoder()
    ids, mask = grid()
    pads = lambda shape: (torch.full(shape, 1), torch.zeros(shape, dtype=torch.long))  # noqa: E731
    (more_ids, more_mask), (para_ids, para_mask) = pads((2, 3, 3)), pads((2, 1, 6))
    with torch.no_grad():
        states = model(ids, mask)
        longer = model(torch.cat([ids, more_ids], -1), torch.cat([mask, more_mask], -1))
        wider = model(torch.cat([ids, para_ids], 1), torch.cat([mask, para_mask], 1))
    assert torch.all(states[mask == 0] == 0)
    assert torch.allclose(longer[..., :6, :], states, atol=1e-5)  # padding tokens at the end of every paragraph
    assert torch.allclose(wider[:, :3], states, atol=1e-5) and torch.all(wider[:, 3] == 0)  # an empty paragraph


def test_paragraph_positions_are_the_second_half_of_the_code():
    model = encoder()
    ids = torch.full((1, 2, 3), 5)
    x = model.embeddings(ids)
    base = model.embeddings.embed(ids) * DIM**0.5
    assert torch.allclose((x - base)[0, 1, :, DIM // 2 :], sinusoid(2, DIM // 2)[1].expand(3, -1), atol=1e-6)
    assert torch.allclose((x - base)[0, :, 2, : DIM // 2], sinusoid(3, DIM // 2)[2].expand(2, -1), atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 9, 3), (1, 2, 9)])
def test_more_paragraphs_or_tokens_than_the_code_has_rows_are_refused(shape):
    model = HierarchicalEncoder(torch.nn.Embedding(50, DIM), ("local",), HEADS, 32, 0.0, max_positions=8)
    with pytest.raises(InputTooLongError, match="at most 8 paragraph ranks"):
        model.embeddings(torch.full(shape, 5))


@pytest.mark.parametrize("switch", ["paragraph_position", "multi_head_pooling", "global_layers", "graph_head"])
def test_every_ablation_runs_and_changes_the_states(switch):
    ids, mask = grid()
    graph = torch.rand(2, 3, 3)
    with torch.no_grad():
        full = encoder()(ids, mask, graph)
        ablated = encoder(dataclasses.replace(EncoderParts(), **{switch: False}))(ids, mask, graph)
    assert ablated.shape == full.shape and torch.isfinite(ablated).all()
    if switch != "multi_head_pooling":  # one pooling head has other shapes, so other weights
        assert not torch.allclose(ablated, full)
