"""The unit-row step (`modeling.fused_unit_rows`): each unit's keys and values with the summary's after them, one
GroupQueryAttention a layer, equal to HierEncDec's torch step.

Tolerances: float32 rows with MatMulNBits computing in float32 (accuracy level 0) are the torch maths, so
log-probabilities agree to 1e-4 of their largest magnitude (the operator's own softmax and rotation round apart from
torch's: 4e-4 of 16 seen), greedy choices exactly and document weights to 1e-5; int8 rows (per-channel scales twice
the largest magnitude the units hold) only closely."""

from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from conftest import LLAMA_FRAME, random_model, tiny_llama_config
from test_fused_step import VOCAB, block_rounded, documents, tiny

from locsum_sdk import constants as C
from locsum_sdk.configs.llama import LlamaConfig
from locsum_sdk.errors import BackendUnavailableError, BundleError, ExportError, OptionError
from locsum_sdk.modeling.fused_llama import fused_step
from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec


def rows_model(rows: int, std: float = 0.3) -> LlamaHierEncDec:
    """A two-layer HierEncDec of heads of 16 (GroupQueryAttention's narrowest) on block-rounded weights."""
    config = tiny_llama_config(VOCAB, d_model=64, lora_rank=4, lora_alpha=8.0, unit_rows=rows, **LLAMA_FRAME)
    return block_rounded(random_model(lambda: LlamaHierEncDec(config), std=std))


def unit_scales(cross, margin: float = 2.0) -> np.ndarray:
    """(layers, 2, KV, d): each layer's largest key and value magnitude per channel, times `margin`, over 127."""
    keys = np.stack([k.abs().amax(dim=(0, 3)).numpy() for k, _ in cross])  # key_t (N, KV, d, L)
    values = np.stack([v.abs().amax(dim=(0, 2)).numpy() for _, v in cross])  # (N, KV, L, d)
    return (np.stack([keys, values], axis=1) * margin / 127).astype(np.float32)


def run_rows(net, accuracy: int, steps: int = 5, beams: int = 2):
    """Decode `steps` positions of 2 items of up to 3 documents (one padding document, padded tails), each beam its
    own history, in torch (slot caches) and in the unit-row graph -> per step (torch log-probs, graph log-probs,
    torch weights, graph weights)."""
    cfg = net.config
    items, units, length, capacity = 2, 3, 9, steps
    g, mask, unit_mask, cross = documents(net)
    scales = unit_scales(cross) if cfg.unit_rows == 8 else None
    graph, _ = fused_step(net, accuracy=accuracy, unit_scales=scales)
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    shape = (items, cfg.kv_heads, beams, capacity, cfg.head_dim)
    cache = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(cfg.layers)]
    rows = []  # (B*K*U, KV, L + C, d): each beam of an item its own copy of the item's documents
    for key_t, value in cross:
        pair = []
        for part in (key_t.transpose(2, 3), value):
            grid = part.numpy().reshape(items, 1, units, cfg.kv_heads, length, cfg.head_dim)
            grid = np.repeat(grid, beams, axis=1).reshape(-1, cfg.kv_heads, length, cfg.head_dim)
            if scales is not None:
                scale = scales[len(rows), len(pair)].reshape(1, cfg.kv_heads, 1, cfg.head_dim)
                grid = np.clip(np.rint(grid / scale), -127, 127).astype(np.int8)
            pair.append(np.concatenate([grid, np.zeros((*grid.shape[:2], capacity, cfg.head_dim), grid.dtype)], 2))
        rows.append(pair)
    slots = -np.ones((items, beams, capacity), np.int64)
    results = []
    for position in range(steps):
        tokens = torch.randint(5, VOCAB, (items, beams), generator=g)
        slots[:, :, position] = np.arange(beams)
        with torch.no_grad():
            log_probs, weights = net.step(tokens, unit_mask, mask, torch.tensor([position]), torch.from_numpy(slots),
                                          cache, cross)
        feeds = {C.INPUT_IDS: tokens.numpy(), C.UNIT_MASK: unit_mask.numpy(), C.ENCODER_ATTENTION_MASK: mask.numpy(),
                 C.POSITION: np.array([position])}
        for i in range(cfg.layers):
            feeds[C.unit_key(i)], feeds[C.unit_value(i)] = rows[i]
        outputs = dict(zip(names, session.run(None, feeds)))
        for i in range(cfg.layers):
            rows[i] = [outputs[C.present_unit_key(i)], outputs[C.present_unit_value(i)]]
        results.append((log_probs.numpy(), outputs[C.LOG_PROBS], weights.numpy(), outputs[C.UNIT_WEIGHTS]))
    return results


def test_float_unit_rows_are_the_torch_step():
    """Every document's attention joined with the summary's in one operator, the documents weighed by their text's
    share of one softmax: the torch step's log-probabilities, greedy choices and document weights (padding
    documents weigh exactly 0)."""
    results = run_rows(rows_model(32), accuracy=0)
    for expected, got, expected_weights, got_weights in results:
        assert np.abs(got - expected).max() < 1e-4 * np.abs(expected).max()
        assert np.array_equal(got.argmax(-1), expected.argmax(-1))
        assert np.abs(got_weights - expected_weights).max() < 1e-5
        assert np.all(got_weights[1, 2] == 0)


def test_int8_unit_rows_stay_close():
    results = run_rows(rows_model(8, std=0.05), accuracy=4)
    for expected, got, expected_weights, got_weights in results:
        assert np.abs(np.exp(got) - np.exp(expected)).max() < 0.03
        assert np.abs(got_weights - expected_weights).max() < 0.03


def test_int8_unit_rows_need_their_scales():
    with pytest.raises(ExportError, match="scales"):
        fused_step(rows_model(8), accuracy=0)


def test_unit_rows_of_heads_narrower_than_16_are_refused():
    net = tiny()
    net.config = replace(net.config, unit_rows=32)
    with pytest.raises(ExportError, match="multiple of 16"):
        fused_step(net, accuracy=0)


def test_an_unknown_unit_row_form_is_refused():
    with pytest.raises(BundleError, match="unit_rows"):
        LlamaConfig(unit_rows=16)


def test_unit_row_bundles_summarize_as_the_slot_step_does(tokenizer_file, tmp_path, monkeypatch):
    """A HierEncDec fine-tuned from a GGUF exported three ways with quantize "blocks": the slot step, float32 unit
    rows and int8 unit rows (calibrated on text like the input's). The encoder of a row bundle writes (units, H, L,
    d) rows, int8 with the step's scales; greedy and with crossing beams, float32 rows write the slot step's
    summary and int8 rows begin it alike; a row bundle rebuilt and exported again without rows has the slot step."""
    from gguf_files import adapted_llm, write_gguf

    from locsum_sdk import Summarizer
    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.checkpoint import save_checkpoint

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path, _, _ = write_gguf(tmp_path / "tiny.gguf", tokenizer_file, d_model=256, ffn_dim=512)
    torch.manual_seed(0)  # the adapters' A
    loaded, net = adapted_llm(path)
    saved = save_checkpoint(net, tmp_path / "tuned", loaded.tokenizer_file)
    text = ("The roof leaks over the hall. The budget is short this year. Anna will ask the council for more. " * 12,
            "The school opens in May. Ben plans the new classes and the teachers agree. " * 9)
    bundles = {rows: export_onnx(saved, tmp_path / f"rows{rows}", quantize="blocks", model_files=[path],
                                 unit_rows=rows, calibration=text)
               for rows in (0, 32, 8)}
    encoder = onnx.load(str(bundles[8].file(C.ENCODER_FILE)), load_external_data=False)
    outputs = {o.name: o.type.tensor_type.elem_type for o in encoder.graph.output}
    assert outputs[C.unit_key(0)] == onnx.TensorProto.INT8 and C.cross_key(0) not in outputs
    assert C.ENCODER_HIDDEN not in outputs  # nor what only it needs: the last layer's MLP, the final norm
    slot_encoder = onnx.load(str(bundles[0].file(C.ENCODER_FILE)), load_external_data=False)
    assert C.ENCODER_HIDDEN in {o.name for o in slot_encoder.graph.output}
    assert len(encoder.graph.node) < len(slot_encoder.graph.node)
    chunked = [node for node in encoder.graph.node if node.op_type == "If"]  # its units' attention in chunks
    assert len(chunked) == net.config.layers and not any(n.op_type == "If" for n in slot_encoder.graph.node)
    assert len(bundles[8].manifest.base["tensors"]) < len(bundles[0].manifest.base["tensors"])  # none left unread
    for options in ({"max_length": 16, "min_length": 16, "whole_sentences": False},
                    {"max_length": 12, "min_length": 12, "whole_sentences": False, "num_beams": 3}):
        summaries = {rows: Summarizer.from_pretrained(bundle.path, threads=1).summarize(list(text), **options)
                     for rows, bundle in bundles.items()}
        assert summaries[32].token_ids == summaries[0].token_ids
        # int8 rows: the same first choices (a random tiny model's near-ties part them later; the step's closeness
        # is test_int8_unit_rows_stay_close's)
        assert summaries[8].token_ids[:2] == summaries[0].token_ids[:2]
        assert len(summaries[8].token_ids) == len(summaries[0].token_ids)
        assert np.abs(summaries[32].unit_weights - summaries[0].unit_weights).max() < 1e-3
    from locsum_sdk.exporters.rebuild import export_again

    again = export_again(bundles[8], tmp_path / "again", "blocks")  # rebuilt from the rows' step: the slot step
    assert again.manifest.model["unit_rows"] == 0
    assert Summarizer.from_pretrained(again.path, threads=1).summarize(list(text), **options).token_ids == \
        summaries[0].token_ids


def test_int8_unit_rows_need_calibration_text(tokenizer_file, tmp_path):
    from gguf_files import adapted_llm, write_gguf

    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.checkpoint import save_checkpoint

    path, _, _ = write_gguf(tmp_path / "tiny.gguf", tokenizer_file, d_model=256, ffn_dim=512)
    loaded, net = adapted_llm(path)
    saved = save_checkpoint(net, tmp_path / "tuned", loaded.tokenizer_file)
    with pytest.raises(ExportError, match="calibration text"):
        export_onnx(saved, tmp_path / "bundle", quantize="blocks", model_files=[path], unit_rows=8)
    with pytest.raises(ExportError, match="quantize blocks"):
        export_onnx(saved, tmp_path / "bundle", model_files=[path], unit_rows=32)
    with pytest.raises(OptionError, match="unit_rows=16"):
        export_onnx(saved, tmp_path / "bundle", quantize="blocks", model_files=[path], unit_rows=16)
    assert not (tmp_path / "bundle").exists()


def test_the_memory_estimate_counts_unit_rows_and_no_slot_cache():
    """A row per unit and beam, its unit's positions and the summary's room (max_length, in whole chunks), at the
    rows' bytes: int8 rows of 4 units and 2 beams hold 2 * (L + C) / L / 4 of float32 units' caches, and no slot
    cache is counted."""
    import dataclasses

    from locsum_sdk import kinds
    from locsum_sdk.memory import estimate_memory

    layout = kinds.get("hierencdec").on({"backbone": "llama"}).layout
    settings = {**dataclasses.asdict(LlamaConfig()), "backbone": "llama"}
    slots, int8, floats = (estimate_memory({**settings, "unit_rows": rows}, layout, 1, 4, 512, 2, 257, 4)
                           for rows in (0, 8, 32))
    assert slots.cache > 0 and int8.cache == floats.cache == 0
    assert int8.cross == slots.cross * 2 * (512 + 256) // 512 // 4
    assert floats.cross == 4 * int8.cross


def test_the_cli_exports_int8_unit_rows_calibrated_on_a_corpus(tokenizer_file, tmp_path, monkeypatch, capsys):
    """`locsum export --quantize blocks --unit-rows 8 --calibration FILE.jsonl`: the manifest records the rows, and
    the bundle summarizes (through a unit cache, the second time from it, alike); a calibration file that is not
    JSON Lines of inputs is refused, naming its line. Where ONNX Runtime has CUDA, device="cuda" refuses the rows
    naming the way out, "auto" runs them on the CPU; `locsum export --bundle ROWS --quantize blocks` exports them
    again with the slot step (into a new directory, or with --force)."""
    import json

    from gguf_files import adapted_llm, write_gguf

    from locsum_sdk import Summarizer, UnitCache
    from locsum_sdk.cli import main
    from locsum_sdk.modeling.checkpoint import save_checkpoint

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path, _, _ = write_gguf(tmp_path / "tiny.gguf", tokenizer_file, d_model=256, ffn_dim=512)
    loaded, net = adapted_llm(path)
    saved = save_checkpoint(net, tmp_path / "tuned", loaded.tokenizer_file)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"documents": [f"The roof leaks over hall {i}. The budget is short."] * 3})
                                for i in range(5)))
    export = ["export", "--checkpoint", str(saved), "--quantize", "blocks", "--model-file", str(path),
              "--unit-rows", "8", "--calibration"]
    assert main([*export, str(corpus), "--output", str(tmp_path / "rows")]) == 0
    assert json.loads((tmp_path / "rows" / C.MANIFEST_FILE).read_text())["model"]["unit_rows"] == 8
    cache = UnitCache()
    summarizer = Summarizer.from_pretrained(tmp_path / "rows", threads=1, unit_cache=cache)
    # no two pages alike: the cache keeps one entry for pages of the same tokens, encoded in different runs of the
    # int8 encoder (whose activations are quantized per run) a little apart
    text = [" ".join(f"The school opens room {i} in May." for i in range(40)),
            " ".join(f"The roof of hall {i} leaks again." for i in range(30))]
    options = {"max_length": 10, "min_length": 10, "whole_sentences": False}
    first, again = (summarizer.summarize(text, **options) for _ in range(2))
    assert first.token_ids == again.token_ids and len(cache) == len(first.units) > 2
    (tmp_path / "bad.jsonl").write_text('{"documents": ["one"]}\nnot json\n')
    assert main([*export, str(tmp_path / "bad.jsonl"), "--output", str(tmp_path / "bad")]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err

    with monkeypatch.context() as cuda:  # ONNX Runtime as onnxruntime-gpu lists its providers
        cuda.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
        with pytest.raises(BackendUnavailableError, match="--unit-rows 0"):
            Summarizer.from_pretrained(tmp_path / "rows", device="cuda")
        on_cpu = Summarizer.from_pretrained(tmp_path / "rows", device="auto", threads=1).summarize(text, **options)
    assert on_cpu.token_ids == first.token_ids
    with monkeypatch.context() as older:  # an ONNX Runtime whose GroupQueryAttention misreads int8 rows
        older.setattr(ort, "__version__", "1.29.1")
        with pytest.raises(BackendUnavailableError, match=r"onnxruntime>=1\.30.*--unit-rows 0"):
            Summarizer.from_pretrained(tmp_path / "rows", threads=1)
    again = ["export", "--bundle", str(tmp_path / "rows"), "--quantize", "blocks", "--output", str(tmp_path / "slots")]
    assert main(again) == 0
    assert json.loads((tmp_path / "slots" / C.MANIFEST_FILE).read_text())["model"]["unit_rows"] == 0
    slots = Summarizer.from_pretrained(tmp_path / "slots", threads=1).summarize(text, **options)
    # its tokens against the slot step's: test_unit_row_bundles_summarize_as_the_slot_step_does
    assert len(slots.token_ids) == len(first.token_ids)
    assert main(again) == 2 and "--force" in capsys.readouterr().err


def test_a_row_encoder_exported_with_its_final_hidden_states_is_still_taken():
    """Row bundles exported before their encoder stopped writing the final hidden states (the shipped default until
    it was exported again) wrote them first: the backend and the manifest's check take that form beside the new
    one, and nothing else (the states after the rows, or alone)."""
    import dataclasses

    from locsum_sdk import kinds

    settings = {**dataclasses.asdict(LlamaConfig()), "backbone": "llama", "unit_rows": 8}
    encoder = kinds.get("hierencdec").graphs(settings)["encoder"]
    hidden = (C.ENCODER_HIDDEN, "tensor(float)")
    rows = [(t.name, t.onnx_type) for t in encoder.outputs]
    assert C.ENCODER_HIDDEN not in encoder.output_names and rows[0] == (C.unit_key(0), "tensor(int8)")
    assert encoder.accepts_outputs(rows) and encoder.accepts_outputs([hidden, *rows])
    assert not encoder.accepts_outputs([*rows, hidden]) and not encoder.accepts_outputs([hidden])
    assert encoder.recorded_outputs == [encoder.output_names, [C.ENCODER_HIDDEN, *encoder.output_names]]
    slots = kinds.get("hierencdec").graphs({**settings, "unit_rows": 0})["encoder"]
    assert slots.output_names[0] == C.ENCODER_HIDDEN and slots.recorded_outputs == [slots.output_names]


@pytest.mark.parametrize("version, dtype, rows, refused", [
    ("1.29.1", "blocks", True, True), ("1.18.0", "blocks", True, True), ("1.30.0", "blocks", True, False),
    ("1.32.0", "blocks", True, False), ("1.31.0.dev20261201", "blocks", True, False), ("2.0.0", "blocks", True, False),
    ("local-build", "blocks", True, False), ("1.21.1", "blocks", False, True), ("1.22.0", "blocks", False, False),
    ("1.20.0", "int8", False, False)])
def test_a_bundle_needs_an_onnx_runtime_that_runs_its_graphs(version, dtype, rows, refused, tmp_path):
    """Unit rows need 1.30 (GroupQueryAttention over an int8 cache), a fused step 1.22 (8-bit MatMulNBits), int8
    graphs nothing more than the extra asks for."""
    from types import SimpleNamespace

    from locsum_sdk.backends.onnxruntime import check_runtime

    bundle = SimpleNamespace(path=tmp_path, manifest=SimpleNamespace(dtype=dtype))
    if refused:
        oldest = "1.30" if rows else "1.22"
        with pytest.raises(BackendUnavailableError, match=rf"onnxruntime {version} does not run.*>={oldest}"):
            check_runtime(version, bundle, rows)
    else:
        check_runtime(version, bundle, rows)
