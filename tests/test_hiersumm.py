"""The Hierarchical Transformer's encoder-decoder: cached decoding steps equal teacher forcing, unit weights are
the attention mass per paragraph, padding paragraphs change nothing, configs round-trip, and it can learn to read
its input (copying a paragraph)."""

import pytest
import torch
from conftest import random_model

from locsum_sdk.backends.base import BeamSlots
from locsum_sdk.configs.hiersumm import HierSummConfig
from locsum_sdk.errors import BundleError
from locsum_sdk.modeling.hiersumm import HierSumm

CONFIG = HierSummConfig(vocab_size=60, d_model=16, encoder_heads=4, decoder_heads=4, encoder_ffn_dim=32,
                        decoder_ffn_dim=32, encoder_layers=("local", "global", "local"), decoder_layers=2,
                        max_positions=64, ranker_hidden=8, dropout=0.0)


def model(seed=0):
    return random_model(lambda: HierSumm(CONFIG), seed)


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


def to_research(state, config):
    """Our names -> the research code's (the inverse of the converter's tables), with its extra buffers and a
    legacy LayerNorm name, as nlpyang/hiersumm saves a model."""
    from locsum_sdk.modeling.hiersumm_research import DECODER, FEED_FORWARD, GLOBAL, LOCAL

    out = {"encoder.pos_emb.pe": torch.zeros(1, 5, 8), "decoder.pos_emb.pe": torch.zeros(1, 5, 16)}
    for name, tensor in state.items():
        base, kind = name.rsplit(".", 1) if "." in name else (name, "")
        if name.startswith("ranker."):
            continue
        if base.startswith("encoder.layers."):
            _, _, index, part = base.split(".", 3)
            table = GLOBAL if config.encoder_layers[int(index)] == "global" else LOCAL
            table = {**table, **{f"feed_forward.{k}": f"feed_forward.{v}" for k, v in FEED_FORWARD.items()}}
            theirs = next(k for k, v in table.items() if v == part)
            out[f"encoder.transformer_layers.{index}.{theirs}.{kind}"] = tensor
        elif base.startswith("layers."):
            _, index, part = base.split(".", 2)
            table = {**DECODER, **{f"feed_forward.{k}": f"feed_forward.{v}" for k, v in FEED_FORWARD.items()}}
            theirs = next(k for k, v in table.items() if v == part)
            out[f"decoder.transformer_layers.{index}.{theirs}.{kind}"] = tensor
            out[f"decoder.transformer_layers.{index}.mask"] = torch.ones(1, 8, 8, dtype=torch.uint8)
        else:
            theirs = {"embed_tokens.weight": "encoder.embeddings.weight", "decoder_tokens.weight":
                      "decoder.embeddings.weight", "encoder.norm.weight": "encoder.layer_norm.a_2",
                      "encoder.norm.bias": "encoder.layer_norm.b_2", "final_norm.weight": "decoder.layer_norm.weight",
                      "final_norm.bias": "decoder.layer_norm.bias", "generator_weight": "generator.0.weight",
                      "generator_bias": "generator.0.bias"}[name]
            out[theirs] = tensor
    return out


def research_options():
    """The research code's options (`opt`) for CONFIG's shapes."""
    import argparse

    return argparse.Namespace(enc_layers=3, inter_layers=[1], heads=4, inter_heads=4, ff_size=32, dec_layers=2,
                              enc_hidden_size=16, dec_hidden_size=16, emb_size=16, share_embeddings=False,
                              share_decoder_embeddings=False)


def research_file(path, config):
    """A random HierSumm of `config` (CONFIG's shapes, untied embeddings) saved at `path` as nlpyang/hiersumm saves
    a model; returns the model."""
    ours = random_model(lambda: HierSumm(config))
    torch.save({"model": to_research(ours.state_dict(), config), "opt": research_options(), "optim": {"state": {}}},
               path)
    return ours


def test_a_research_checkpoint_converts_and_decodes_the_same(tmp_path):
    import dataclasses

    from locsum_sdk.modeling.checkpoint import load_checkpoint

    config = dataclasses.replace(CONFIG, share_embeddings=False, tie_generator=False)
    ours = research_file(tmp_path / "model_step_1000.pt", config)
    loaded = load_checkpoint(tmp_path / "model_step_1000.pt").model
    assert loaded.kind == "hiersumm" and loaded.config.encoder_layers == ("local", "global", "local")
    ids, mask, units, graph, target = batch()
    with torch.no_grad():
        want, _ = ours(ids, mask, units, target, graph)
        got, _ = loaded(ids, mask, units, target, graph)
    assert torch.allclose(got, want, atol=1e-5)
    with pytest.raises(BundleError, match="loads as hiersumm, not pagesum"):
        load_checkpoint(tmp_path / "model_step_1000.pt", kind="pagesum")
    torch.save({"model": {"encoder.embeddings.weight": torch.zeros(4, 16), "encoder.mystery.weight": torch.zeros(1)},
                "opt": research_options()}, tmp_path / "odd.pt")
    with pytest.raises(BundleError, match="not a weight of a hiersumm research model"):
        load_checkpoint(tmp_path / "odd.pt")


def test_a_research_checkpoint_exports_from_the_command_line_and_summarizes(tmp_path, tokenizer, tokenizer_file):
    """The README's way to generate from nlpyang/hiersumm's file: `locsum export --kind hiersumm --checkpoint
    model_step_N.pt --tokenizer tokenizer.json --output DIR`, then a Summarizer on the bundle."""
    import dataclasses

    from locsum_sdk import Summarizer
    from locsum_sdk.cli import main

    config = dataclasses.replace(CONFIG, vocab_size=tokenizer.get_vocab_size(), share_embeddings=False,
                                 tie_generator=False, pad_token_id=tokenizer.token_to_id("<pad>"),
                                 bos_token_id=tokenizer.token_to_id("<s>"), eos_token_id=tokenizer.token_to_id("</s>"),
                                 decoder_start_token_id=tokenizer.token_to_id("<s>"))
    research_file(tmp_path / "model_step_1000.pt", config)
    bundle = tmp_path / "bundle"
    assert main(["export", "--kind", "hiersumm", "--checkpoint", str(tmp_path / "model_step_1000.pt"),
                 "--tokenizer", str(tokenizer_file), "--output", str(bundle)]) == 0
    summary = Summarizer.from_pretrained(bundle, threads=1).summarize(
        "The board met on Monday.\n\nIt approved the budget for next year.", query="budget", max_length=6)
    assert summary.kind == "hiersumm" and summary.text and len(summary.units) == 2


def test_a_research_file_with_anything_else_pickled_is_refused(tmp_path):
    import collections
    import pathlib

    from locsum_sdk.modeling.checkpoint import load_checkpoint

    hook = pathlib.PurePosixPath("x")  # an object of a class torch will not unpickle
    torch.save({"model": {}, "opt": collections.OrderedDict(a=1), "hook": hook}, tmp_path / "x.pt")
    with pytest.raises(BundleError, match="cannot be read .*class pathlib") as refused:
        load_checkpoint(tmp_path / "x.pt")
    assert "weights_only" not in str(refused.value)  # torch's advice to load it unsafely is not passed on


def test_it_learns_to_copy_a_paragraph():
    """The decoder can learn to read its input: trained to copy the second of three paragraphs (one token repeated,
    the others random), it does within a few dozen steps, whatever the seed or thread count (a model blind to its
    input gets about 1 in 11 right, the end of the sequence). Copying a paragraph of random tokens needs an alignment
    whose sudden arrival varies from 500 to over 3,000 steps with the numerics: too fragile for a test."""
    torch.manual_seed(0)
    config = HierSummConfig(vocab_size=50, d_model=64, encoder_heads=4, decoder_heads=4, encoder_ffn_dim=128,
                            decoder_ffn_dim=128, encoder_layers=("local", "local", "global"), decoder_layers=2,
                            max_positions=64, ranker_hidden=8, dropout=0.0)
    copier = HierSumm(config)
    copier.reset_parameters(0.02)
    optimizer = torch.optim.Adam(copier.parameters(), lr=1e-3)
    items, paragraphs, length = 16, 3, 10
    accuracy = 0.0
    for _ in range(300):
        text = torch.randint(3, 50, (items, paragraphs, length))
        text[:, 1] = text[:, 1, :1]
        ids = torch.cat([torch.zeros(items, paragraphs, 1, dtype=torch.long), text,
                         torch.full((items, paragraphs, 1), 2)], -1)
        target = torch.cat([text[:, 1], torch.full((items, 1), 2)], -1)
        decoder_input_ids = torch.cat([torch.full((items, 1), 2), target[:, :-1]], -1)
        log_probs, _ = copier(ids, torch.ones_like(ids), torch.ones(items, paragraphs, dtype=torch.bool),
                              decoder_input_ids)
        accuracy = (log_probs.argmax(-1) == target).float().mean().item()  # on a batch it has not trained on yet
        if accuracy > 0.9:
            break
        loss = torch.nn.functional.nll_loss(log_probs.reshape(-1, 50), target.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert accuracy > 0.9
