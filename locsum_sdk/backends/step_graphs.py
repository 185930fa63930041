"""The torch backend's decoding step replayed from CUDA graphs: captured once per shape bucket, with static
buffers.

A session's step has fixed shapes for as long as its cache capacity does not grow (batch, beams, units and unit
length are the session's; the cache grows by `BeamSlots`' chunk): that capacity is the bucket. The first step of a
bucket copies its inputs (last tokens, position, cache slots) into static tensors and captures the step over them,
the session's cache and the units' keys and values (whose addresses stay put within the bucket); each later step
copies its inputs into the same tensors and replays the graph, whose outputs are static tensors too. Beams are
reordered through the cache slots, an input like any other, so reordering needs no capture of its own; finished
hypotheses are the generation loop's and change no shape.

Warming up and capturing run the step on the bucket's first inputs: the step writes its keys and values at its
position, which a second run with the same inputs writes again with the same values, so the replay that follows
computes that first step exactly as an eager step would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("locsum_sdk")

WARMUP_RUNS = 2  # eager runs on a side stream before capture (allocator and library workspaces settle)

Replay = Callable[[], Any]


def cuda_capture(torch: Any, run: Callable[[], Any]) -> Replay:
    """`run` captured as a CUDA graph -> a function that replays it and returns the outputs captured."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARMUP_RUNS):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = run()

    def replay() -> Any:
        graph.replay()
        return outputs

    return replay


def capture_unsupported(torch: Any, device: str) -> str | None:
    """Why the step cannot be captured on `device` (None: it can)."""
    if device != "cuda":
        return f"CUDA graphs need a CUDA device (this backend runs on {device})"
    if not hasattr(torch.cuda, "CUDAGraph"):
        return f"this torch ({torch.__version__}) has no CUDA graphs"
    return None


class StepGraphs:
    """Static input buffers and one captured step per bucket on `device`; `capture` turns a step over the buffers
    into its replay (`cuda_capture` on a GPU)."""

    def __init__(self, torch: Any, device: str, capture: Callable[[Any, Callable[[], Any]], Replay] = cuda_capture):
        self.torch, self.device, self.capture = torch, device, capture
        self.bucket: int | None = None
        self.inputs: dict[str, Any] = {}
        self.replay: Replay | None = None
        self.captures = 0
        self.failed: str | None = None  # why capture failed, after which every step runs eagerly

    def step(self, bucket: int, inputs: dict[str, Any], run: Callable[[dict[str, Any]], Any]) -> Any:
        """The step's outputs for `inputs` (host arrays by name): a bucket seen for the first time is captured over
        static copies of them (`run(static inputs)` is the step), a known one replayed with them copied in."""
        torch = self.torch
        if self.failed is not None:
            return run({name: torch.as_tensor(value).to(self.device) for name, value in inputs.items()})
        if bucket != self.bucket or self.replay is None:
            self.replay = None  # the last bucket's graph and buffers go before the next ones are made
            static = {name: torch.as_tensor(value).to(self.device).clone() for name, value in inputs.items()}
            self.inputs, self.bucket = static, bucket
            try:
                self.replay = self.capture(torch, lambda: run(static))
            except RuntimeError as error:  # an op that cannot be captured (a host sync, an unsupported kernel)
                self.failed = f"{type(error).__name__}: {error}"
                logger.warning("cuda_graphs: capturing the decoding step failed (%s); it runs eagerly", self.failed)
                return run(static)
            self.captures += 1
            return self.replay()
        for name, value in inputs.items():
            self.inputs[name].copy_(torch.as_tensor(value))
        return self.replay()
