"""The Llama backbone and its base model file: a GGUF read as transformers reads it (the same dequantized tensors,
the same token ids), the model equal to `transformers.LlamaForCausalLM`, a unit's prefix cache and the summary's
steps (slot cache, beams reordered) equal to running the whole sequence at once. The real base model is checked
the same way where its wheel is installed."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest
import torch
from gguf_files import write_gguf

from locsum_sdk.base_model import BASE_FILE, CHAT_PROMPT, INSTALL_BASE, base_file, read_base
from locsum_sdk.configs.llama import FRAME, LlamaConfig
from locsum_sdk.errors import BundleError, BundleNotFoundError
from locsum_sdk.modeling.llama import Llama

transformers = pytest.importorskip("transformers")
from transformers.initialization import no_init_weights  # noqa: E402
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint  # noqa: E402

PLAIN_BLOCK = {"attention_bias": False, "output_bias": False, "mlp_bias": False, "tie_embeddings": True}
ROPE_SCALING = ("head_size", "rope_type", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                "rope_original_positions", "rope_divisors", "instruction", "question")  # LlamaConfig's defaults,
# which a file with no such settings leaves unset
TEXTS = ["The board met on 12 May 2026 to approve the budget of 3,450.75 dollars.",
         "  Hello   world!\n\nIt's   <s> café </s> naïve -- 100%", ""]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tokenizer_file):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tokenizer_file)


@pytest.fixture(scope="module")
def tiny_base(tiny_gguf):
    return read_base(tiny_gguf[0])


def llama(base) -> Llama:
    model = Llama(LlamaConfig(**base.config)).eval()
    model.load_state_dict({name: torch.tensor(array) for name, array in base.weights.items()}, strict=True)
    return model


def hf_llama(path):
    """transformers' model of a GGUF file, with the tensors transformers' own GGUF loader dequantizes."""
    meta = load_gguf_checkpoint(str(path))["config"]
    config = transformers.LlamaConfig(**{k: v for k, v in meta.items() if k != "model_type"})
    with no_init_weights():  # every weight is the file's: no random initialization first (5 s for SmolLM2)
        model = transformers.LlamaForCausalLM(config).eval()
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    model.load_state_dict(tensors, strict=False)
    model.tie_weights()
    return model, tensors


def check_against_transformers(path, base, texts=TEXTS, atol=1e-4):
    hf, tensors = hf_llama(path)
    for name, tensor in tensors.items():
        if name != "lm_head.weight":
            np.testing.assert_array_equal(base.weights[name.removeprefix("model.")], tensor.numpy(), err_msg=name)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for text in texts:
        assert base.tokenizer.encode(text).ids == hf_tokenizer(text)["input_ids"], text
    ids = torch.tensor([base.tokenizer.encode(texts[0]).ids])
    with torch.no_grad():
        ours, theirs = llama(base)(ids), hf(ids).logits
    assert torch.allclose(ours, theirs, atol=atol, rtol=0), (ours - theirs).abs().max()


def test_a_gguf_reads_as_transformers_reads_it(tiny_gguf, tiny_base):
    path, config, weights = tiny_gguf
    newline = tiny_base.tokenizer.token_to_id("Ċ")  # byte-level "\n"
    shape = {k: v for k, v in tiny_base.config.items() if k not in FRAME}
    expected = {**config, "decoder_start_token_id": newline, **PLAIN_BLOCK}
    assert shape == pytest.approx(expected, rel=1e-7)  # float32 in the file
    decode = tiny_base.tokenizer.decode
    head, tail = (tiny_base.config[name] for name in ("unit_head", "unit_tail"))
    assert decode(head, skip_special_tokens=False) + "T" + decode(tail + [newline], skip_special_tokens=False) == \
        CHAT_PROMPT[0] + "T" + CHAT_PROMPT[3] + "\n"
    q = tiny_base.weights["layers.1.self_attn.q_proj.weight"]  # unpermuted back to HF's layout (4 bits of error)
    assert np.abs(q - weights["layers.1.self_attn.q_proj.weight"]).max() < 0.05
    check_against_transformers(path, tiny_base, atol=1e-5)


def test_a_units_prefix_and_summary_equal_the_whole_sequence(tiny_base):
    model, rng = llama(tiny_base), torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    units = [torch.randint(3, vocab, (n,), generator=rng) for n in (7, 4, 9)]
    summary = torch.randint(3, vocab, (3, 5), generator=rng)
    padded = torch.full((3, 9), model.config.pad_token_id)
    mask = torch.zeros(3, 9, dtype=torch.long)
    for i, unit in enumerate(units):
        padded[i, : len(unit)], mask[i, : len(unit)] = unit, 1
    with torch.no_grad():
        _, unit_kv = model.encode_units(padded, mask)
        hidden = model.decode(summary, unit_kv, mask)
        for i, unit in enumerate(units):
            whole = model(torch.cat([unit, summary[i]])[None])[0, len(unit):]
            assert torch.allclose(model.lm_logits(hidden[i]), whole, atol=1e-5)


def test_steps_with_reordered_beams_equal_each_beams_whole_history(tiny_base):
    model, rng = llama(tiny_base), torch.Generator().manual_seed(1)
    vocab, beams, steps = model.config.vocab_size, 3, 5
    units = torch.randint(3, vocab, (2, 6), generator=rng)
    mask = torch.ones_like(units)
    mask[1, 4:] = 0
    lengths = mask.sum(1)
    with torch.no_grad():
        _, unit_kv = model.encode_units(units, mask)
        cache = model.empty_cache(2, beams, steps)
        slots = torch.full((2, beams, steps), -1)
        history = [[[] for _ in range(beams)] for _ in range(2)]
        for position in range(steps):
            tokens = torch.randint(3, vocab, (2, beams), generator=rng)
            if position:  # every beam continues a random beam of its unit: its history and slot map follow
                parents = torch.randint(0, beams, (2, beams), generator=rng)
                slots = torch.gather(slots, 1, parents[:, :, None].expand(-1, -1, steps))
                history = [[list(history[n][p]) for p in parents[n].tolist()] for n in range(2)]
            slots[:, :, position] = torch.arange(beams)
            for n in range(2):
                for k in range(beams):
                    history[n][k].append(int(tokens[n, k]))
            hidden = model.step(tokens, unit_kv, mask, cache, torch.tensor([position]), slots)
            logits = model.lm_logits(hidden).view(2, beams, -1)
            for n in range(2):
                for k in range(beams):
                    sequence = torch.cat([units[n, : lengths[n]], torch.tensor(history[n][k])])
                    whole = model(sequence[None])[0, -1]
                    assert torch.allclose(logits[n, k], whole, atol=1e-5), (position, n, k)


def test_a_missing_base_model_names_the_command_that_installs_it(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(BundleNotFoundError, match=INSTALL_BASE):
        base_file()


def test_a_damaged_or_foreign_file_is_a_bundle_error(tmp_path, tiny_gguf):
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(tiny_gguf[0].read_bytes()[:5000])
    foreign = tmp_path / "notes.gguf"
    foreign.write_text("not a model")
    for path in (damaged, foreign):
        with pytest.raises(BundleError):
            read_base(path)
    with pytest.raises(BundleNotFoundError):
        read_base(tmp_path / "absent.gguf")


def test_the_installed_base_model_reads_as_transformers_reads_it():
    try:
        path = base_file()
    except BundleNotFoundError:
        pytest.skip(f"{BASE_FILE} is not installed here ({INSTALL_BASE})")
    base = read_base(path)
    not_the_files = ("backbone", "lora_rank", "lora_alpha", "unit_rows", *ROPE_SCALING)  # settings the file lacks
    expected = {k: v for k, v in LlamaConfig().to_dict().items() if k not in not_the_files and k not in FRAME}
    assert {k: v for k, v in base.config.items() if k not in FRAME} == pytest.approx(expected, rel=1e-7)  # SmolLM2
    assert base.tokenizer.decode(base.config["unit_tail"], skip_special_tokens=False) == CHAT_PROMPT[3]
    check_against_transformers(path, base)


def test_a_gguf_loads_as_a_pagesum_on_its_backbone(tiny_gguf, tiny_base, tmp_path, monkeypatch):
    """`load_checkpoint` takes a GGUF by its magic: as a PageSum, page weights that start equal, its one-page scores
    the language model's own, the tokenizer written once to the user's cache."""
    from locsum_sdk.modeling.checkpoint import load_checkpoint

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    checkpoint = load_checkpoint(tiny_gguf[0], kind="pagesum")
    model = checkpoint.model
    assert model.kind == "pagesum" and torch.all(model.page_conf.weight == 0)
    assert checkpoint.tokenizer_file.is_relative_to(tmp_path) and checkpoint.tokenizer_file.name == "tokenizer.json"
    assert load_checkpoint(tiny_gguf[0], kind="pagesum").tokenizer_file == checkpoint.tokenizer_file
    ids = torch.tensor([tiny_base.tokenizer.encode(TEXTS[0]).ids])
    with torch.no_grad():
        scores, _ = model(ids[:, None, :-3], torch.ones_like(ids[:, None, :-3]), torch.ones(1, 1, dtype=torch.bool),
                          ids[:, -3:])
        expected = torch.log_softmax(llama(tiny_base)(ids), -1)[:, -3:]
    assert torch.allclose(scores, expected, atol=1e-5)
