"""Our BART == transformers.BartForConditionalGeneration (float32, within 1e-4), with and without the cache."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from locsum_sdk.backends.base import BeamSlots, grown_cache  # noqa: E402
from locsum_sdk.configs.model import BartConfig  # noqa: E402
from locsum_sdk.modeling.bart import Bart, attention_bias, fold_query_scaling  # noqa: E402
from locsum_sdk.modeling.checkpoint import load_checkpoint  # noqa: E402
from locsum_sdk.modeling.weights import from_hf_names  # noqa: E402

ATOL = 1e-4

CONFIGS = [
    dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
         encoder_ffn_dim=64, decoder_ffn_dim=64),
    dict(d_model=48, encoder_layers=1, decoder_layers=3, encoder_attention_heads=6, decoder_attention_heads=3,
         encoder_ffn_dim=40, decoder_ffn_dim=72, scale_embedding=True, activation_function="relu"),
]


def hf_model(seed: int, **shape):
    torch.manual_seed(seed)
    config = transformers.BartConfig(vocab_size=97, max_position_embeddings=64, attn_implementation="eager", **shape)
    model = transformers.BartForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger than the default init, so differences would show
            p.normal_(0, 0.2)
        model.final_logits_bias.normal_()
    model.tie_weights()
    return model


def ours_from(hf) -> Bart:
    model = Bart(BartConfig.from_hf(hf.config.to_dict())).eval()
    state = from_hf_names(hf.state_dict())
    model.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=True)
    return model


def inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 97, (3, 21), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 14:] = 0
    mask[2, 4:] = 0
    return ids, mask, torch.randint(3, 97, (3, 9), generator=g)


@pytest.mark.parametrize("shape", CONFIGS)
def test_logits_match_transformers(shape):
    hf = hf_model(0, **shape)
    ours = ours_from(hf)
    ids, mask, dec = inputs(1)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
        got = ours(ids, mask, dec)
    assert got.shape == expected.shape
    assert (got - expected).abs().max() <= ATOL


@pytest.mark.parametrize("shape", CONFIGS)
def test_cached_steps_match_transformers(shape):
    hf = hf_model(2, **shape)
    ours = ours_from(hf)
    ids, mask, dec = inputs(3)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
        memory = ours.encoder(ids, mask)
        cross, bias = ours.cross_kv(memory), attention_bias(mask, memory.dtype)
        cfg, batch, length = ours.config, dec.shape[0], dec.shape[1]
        slots, steps = BeamSlots(batch, 1, chunk=2), []  # capacity 2, grown every other step
        cache = [tuple(torch.zeros(batch, cfg.decoder_heads, 1, 2, cfg.head_dim) for _ in "kv")
                 for _ in range(cfg.decoder_layers)]
        for t in range(length):
            if slots.advance(None):
                cache = [tuple(grown_cache(c, slots.capacity, c.new_zeros) for c in layer) for layer in cache]
            hidden = ours.decoder.step(dec[:, t : t + 1], cross, bias, cache, torch.tensor([t]),
                                       torch.from_numpy(slots.slots))
            steps.append(ours.lm_logits(hidden))
    assert (torch.stack(steps, dim=1) - expected).abs().max() <= ATOL


@pytest.mark.parametrize("heads, exact", [(4, True), (2, False)])  # head_dim 16 (scaling 1/4) and 32 (1/sqrt(32))
def test_folding_query_scaling_keeps_logits(heads, exact):
    """Export folds 1/sqrt(d) into q_proj: bit-exact for a power-of-two scaling, within float rounding otherwise."""
    shape = dict(CONFIGS[0], d_model=64, encoder_attention_heads=heads, decoder_attention_heads=heads)
    ours = ours_from(hf_model(4, **shape))
    ids, mask, dec = inputs(5)
    with torch.no_grad():
        expected = ours(ids, mask, dec)
        fold_query_scaling(ours)
        got = ours(ids, mask, dec)
    assert all(m.scaling == 1.0 for m in ours.modules() if hasattr(m, "scaling"))
    assert torch.equal(got, expected) if exact else (got - expected).abs().max() <= 1e-5


def test_hf_directory_and_research_state_dict_load_as_pagesum(tmp_path, caplog):
    """One page of PageSum is BART; lin.* of the research state dict becomes page_conf."""
    hf = hf_model(4, **CONFIGS[0])
    hf.save_pretrained(tmp_path / "hf")
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        plain = load_checkpoint(tmp_path / "hf").model
    assert "page_conf starts at zero" in caplog.text
    assert torch.count_nonzero(plain.page_conf.weight) == 0

    state = dict(hf.state_dict())
    state["lin.weight"], state["lin.bias"] = torch.randn(1, 32), torch.randn(1)
    torch.save(state, tmp_path / "pagesum.bin")
    (tmp_path / "config.json").write_text(json.dumps(hf.config.to_dict()))
    research = load_checkpoint(tmp_path / "pagesum.bin").model
    assert torch.equal(research.page_conf.weight, state["lin.weight"])

    ids, mask, dec = inputs(5)
    with torch.no_grad():
        expected = torch.log_softmax(hf(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits, -1)
        got, weights = research(ids[:, None], mask[:, None], torch.ones(3, 1, dtype=torch.bool), dec)
    assert (got - expected).abs().max() <= ATOL
    assert torch.all(weights == 1)


def test_loader_refuses_wrong_names_and_shapes(tmp_path):
    from locsum_sdk.errors import BundleError

    hf = hf_model(6, **CONFIGS[0])
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["d_model"] = 64
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(BundleError, match="has shape"):
        load_checkpoint(tmp_path)
