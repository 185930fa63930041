"""The TensorRT export and backend running their own code end to end on the CPU, over stand-ins for TensorRT's
builder and runtime (plans are the prepared graphs, run by ONNX Runtime) and for cuda-python (device memory is
aligned host memory): `build_engines`, then `Summarizer(backend="tensorrt")` decoding token for token as ONNX
Runtime does on the same prepared graphs, with every address TensorRT is given aligned and inside an allocation,
and the encoder holding a cross key/value buffer of its own only where a run's place in the grid is not aligned
(then copied there on the device)."""

import gpu_standin
import numpy as np
import pytest
import trt_standin

from locsum_sdk import Summarizer
from locsum_sdk.exporters import tensorrt as trt_export

if trt_standin.bindings_dir() is None:
    pytest.skip(f"{trt_standin.BINDINGS} is not installed", allow_module_level=True)

TEXT = ("The committee met on Tuesday. Anna proposed moving the library budget to the spring. "
        "Ben said the roof repair costs 15,000 euros and must come first. They agreed to vote next week. ") * 4


@pytest.fixture
def device(monkeypatch):
    with trt_standin.loaded():
        yield gpu_standin.install(monkeypatch)


@pytest.fixture(params=["pagesum", "hierencdec", "dyle", "hiersumm"])
def tiny(request, bundle_dir, hierencdec_bundle_dir, dyle_bundle_dir, hiersumm_bundle_dir):
    return {"pagesum": bundle_dir, "hierencdec": hierencdec_bundle_dir, "dyle": dyle_bundle_dir,
            "hiersumm": hiersumm_bundle_dir}[request.param]


@pytest.mark.parametrize("options", [{"num_beams": 1, "max_length": 12},
                                     {"num_beams": 3, "max_length": 40, "min_length": 36, "no_repeat_ngram_size": 1}])
def test_engines_decode_as_onnxruntime(device, tiny, tmp_path, options, monkeypatch):
    shapes = trt_export.EngineShapes(max_batch=2, max_units=16, max_unit_len=128, max_beams=3, max_steps=64,
                                     max_candidates=64)
    trt_export.build_engines(tiny, tmp_path / "trt", shapes)
    reference = trt_export.prepared_bundle(tiny, tmp_path / "reference", max_beams=3)
    kind = Summarizer.from_pretrained(tiny).kind
    documents = TEXT if kind in ("pagesum", "dyle") else TEXT.split(". ")[:6]
    want = Summarizer.from_pretrained(reference, backend="onnxruntime").summarize(documents, **options)
    summarizer = Summarizer.from_pretrained(tmp_path / "trt", backend="tensorrt", unit_batch_size=1)
    layout, starts = summarizer.backend.kind.layout, set()  # the grid row each encoder run writes at
    runs = layout.encoder_runs
    monkeypatch.setattr(layout, "encoder_runs", lambda *a: [starts.add(r[2]) or r for r in runs(*a)])
    got = summarizer.summarize(documents, **options)
    assert got.token_ids == want.token_ids
    assert np.allclose(got.unit_weights, want.unit_weights, atol=1e-5)
    backend = summarizer.backend
    encoder, decoder = backend.engines["encoder"], backend.decoder
    assert decoder.context.runs >= len(got.token_ids) and encoder.context.runs >= 1
    for engine in backend.engines.values():
        for name, address in engine.context.addresses.items():
            assert address % 256 == 0, name
    crosses = {n for n in decoder.inputs if n.startswith("cross_")}
    row_bytes = {n: decoder.dtypes[n].itemsize * int(np.prod(decoder.context.shapes[n][1:])) for n in crosses}
    misaligned = {n for n, size in row_bytes.items() if any(row * size % 256 for row in starts)}
    assert crosses & set(encoder.buffers) == misaligned


def test_float16_engines_step_as_their_graphs(device, tiny, tmp_path):
    """--fp16 engines (float16 cross keys/values and caches: half the bytes per row and position) through the
    backend: on a two-item grid with a padding unit, encoded one unit per run, three greedy steps' full
    log-probabilities equal those of the same float16 graphs run raw on ONNX Runtime (`encode_and_step`)."""
    from test_export import random_units
    from test_tensorrt import encode_and_step

    from locsum_sdk.backends.tensorrt import TensorRTBackend
    from locsum_sdk.bundle import Bundle
    from locsum_sdk.unit_batch import UnitBatch

    source = Bundle.load(tiny)
    shapes = trt_export.EngineShapes(max_batch=2, max_units=8, max_unit_len=64, max_beams=1, max_steps=32)
    trt_export.build_engines(tiny, tmp_path / "trt", shapes, fp16=True)
    graphs = trt_export.prepared_bundle(tiny, tmp_path / "graphs", max_beams=1, fp16=True)
    vocab, rng = source.manifest.model["vocab_size"], np.random.default_rng(1)
    batch = UnitBatch.from_units([random_units(rng, 3, 33, vocab), random_units(rng, 1, 33, vocab)], pad=1)
    want = encode_and_step(graphs, source, batch)
    backend = TensorRTBackend(Bundle.load(tmp_path / "trt"))
    session = backend.start(batch, 1, 1)
    tokens = np.full((batch.batch, 1), source.manifest.model["decoder_start_token_id"], np.int64)
    for step in want:
        session.step(tokens, None)
        assert np.allclose(session.full_log_probs(), step, atol=1e-6)
        tokens = step.argmax(-1)
    session.close()
