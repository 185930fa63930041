"""The torch backend's captured decoding step (`backends.step_graphs`) on the CPU: the capture itself needs a GPU
(tests/gpu checks it), so here it is stood in for by running the step over the same static buffers; what this proves
is the locsum side: one capture per cache bucket, every later step copying its inputs into the static buffers, the
cache growing into a new bucket, and the same tokens as the eager step for every kind."""

from __future__ import annotations

import functools
import logging
import random

import pytest
from conftest import document

from locsum_sdk import Summarizer
from locsum_sdk.backends import step_graphs
from locsum_sdk.backends import torch as torch_backend
from locsum_sdk.constants import CACHE_CHUNK
from locsum_sdk.errors import OptionError

pytest.importorskip("torch")


class Counting(step_graphs.StepGraphs):
    """StepGraphs whose capture is the step itself (what replaying a captured graph computes), counting captures
    and replays."""

    made: list[Counting] = []

    def __init__(self, torch, device):
        super().__init__(torch, device, capture=self.stand_in)
        self.replays = 0
        Counting.made.append(self)

    def stand_in(self, torch, run):
        def replay():
            self.replays += 1
            return run()
        return replay


@pytest.fixture
def captured(monkeypatch):
    Counting.made = []
    monkeypatch.setattr(torch_backend, "capture_unsupported", lambda torch, device: None)
    monkeypatch.setattr(torch_backend, "StepGraphs", Counting)
    return Counting.made


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("checkpoint", ["checkpoint_dir", "llama_checkpoint_dir"])
def test_static_buffers_give_the_eager_tokens_and_capture_once_per_bucket(request, captured, checkpoint, num_beams):
    path = request.getfixturevalue(checkpoint)
    rng = random.Random(num_beams)
    inputs = [document(rng, 12), [document(rng, 5), document(rng, 6)]]
    steps = CACHE_CHUNK + 8  # past the first bucket: the cache grows once
    options = dict(num_beams=num_beams, max_length=steps + 1, min_length=steps)
    eager = Summarizer.from_pretrained(path, backend="torch", cuda_graphs=False).summarize_batch(inputs, **options)
    assert not captured
    replayed = Summarizer.from_pretrained(path, backend="torch").summarize_batch(inputs, **options)
    assert [s.token_ids for s in replayed] == [s.token_ids for s in eager]
    graphs = captured[-1]
    assert graphs.captures == 2 and graphs.replays >= steps  # one capture per cache capacity, every step replayed


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("checkpoint, kind", [*(("checkpoint_dir", kind) for kind in ("pagesum", "hierencdec", "dyle",
                                                                                     "hiersumm")),
                                             ("llama_checkpoint_dir", "hierencdec")])
def test_every_kind_gives_the_eager_tokens_from_static_buffers(request, captured, checkpoint, kind, dtype):
    """In half precision too: the step's cache and the Hierarchical Transformer's graph take the model's dtype."""
    import numpy as np
    import torch

    from locsum_sdk.backends.torch import generate_from_ids
    from locsum_sdk.generation import GenerationOptions
    from locsum_sdk.modeling.checkpoint import load_checkpoint

    model = load_checkpoint(request.getfixturevalue(checkpoint), kind=kind).model.to(getattr(torch, dtype))
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    units = [[tuple(int(t) for t in rng.integers(4, vocab, 30)) for _ in range(4)],
             [tuple(int(t) for t in rng.integers(4, vocab, 20)) for _ in range(2)]]
    options = GenerationOptions(num_beams=3, max_length=CACHE_CHUNK + 6, min_length=CACHE_CHUNK + 4)
    eager = generate_from_ids(model, units, options, cuda_graphs=False)
    replayed = generate_from_ids(model, units, options)
    assert [h.token_ids for h in replayed] == [h.token_ids for h in eager]
    assert captured[-1].captures == 2


def test_on_the_cpu_the_step_runs_eagerly_saying_why(checkpoint_dir, caplog):
    with caplog.at_level(logging.INFO, logger="locsum_sdk"):
        summarizer = Summarizer.from_pretrained(checkpoint_dir, backend="torch", device="cpu", cuda_graphs=True)
    assert "cuda_graphs: CUDA graphs need a CUDA device" in caplog.text
    assert summarizer.summarize(document(random.Random(0), 6), max_length=6).token_ids
    with pytest.raises(OptionError, match="cuda_graphs='yes' is not accepted"):
        Summarizer.from_pretrained(checkpoint_dir, backend="torch", cuda_graphs="yes")


def test_a_bucket_is_captured_over_copies_of_its_first_inputs():
    import numpy as np
    import torch

    runs = []
    graphs = step_graphs.StepGraphs(torch, "cpu", capture=lambda torch, run: run)
    step = functools.partial(graphs.step, 32)
    first = np.array([[5, 6]])
    out = step({"input_ids": first}, lambda inputs: runs.append(inputs["input_ids"]) or inputs["input_ids"] * 2)
    first[0, 0] = 99  # the caller's array changes; the static copy does not
    assert out.tolist() == [[10, 12]] and runs[0].tolist() == [[5, 6]]
    out = step({"input_ids": np.array([[7, 8]])}, lambda inputs: inputs["input_ids"] * 2)
    assert out.tolist() == [[14, 16]] and runs[0] is graphs.inputs["input_ids"]  # the same buffer, new values
    assert graphs.captures == 1


def test_a_step_that_cannot_be_captured_runs_eagerly_saying_why(caplog):
    import numpy as np
    import torch

    def refuse(torch, run):
        run()  # warm-up ran; the capture itself fails
        raise RuntimeError("operation not permitted when stream is capturing")

    graphs = step_graphs.StepGraphs(torch, "cpu", capture=refuse)
    with caplog.at_level(logging.WARNING, logger="locsum_sdk"):
        outs = [graphs.step(32 + 32 * (i // 2), {"x": np.array([i])}, lambda inputs: inputs["x"] + 1) for i in range(4)]
    assert [o.tolist() for o in outs] == [[1], [2], [3], [4]]
    assert graphs.captures == 0 and "capturing the decoding step failed" in caplog.text
    assert caplog.text.count("failed") == 1  # said once; later buckets do not try again
