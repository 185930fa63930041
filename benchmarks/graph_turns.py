"""Bundles set side by side on the same pages in one run, taking turns, with their graphs' runs timed inside the
ONNX Runtime backend: what `test_fused_step.py` and `test_merged_adapters.py` print."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from locsum_sdk import Summarizer
from locsum_sdk.backends import onnxruntime as ort_backend


@dataclass
class Turns:
    """Per bundle, per round: the decoder graph's median ms a run, the whole step's ms a token (search and decoding
    options included), the encoder graph's ms over the input; and its last summary's tokens."""

    graph_ms: dict[str, list[float]] = field(default_factory=dict)
    step_ms: dict[str, list[float]] = field(default_factory=dict)
    encoder_ms: dict[str, list[float]] = field(default_factory=dict)
    tokens: dict[str, list[int]] = field(default_factory=dict)

    def medians(self) -> dict[str, float]:
        """{bundle}_graph_ms, {bundle}_step_ms and {bundle}_encoder_ms: the medians over the rounds."""
        return {f"{key}_{what}": float(np.median(values)) for what, table in
                (("graph_ms", self.graph_ms), ("step_ms", self.step_ms), ("encoder_ms", self.encoder_ms))
                for key, values in table.items()}


class GraphTimer:
    """Every graph run of every Summarizer in the process timed, by graph name, while the monkeypatch holds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.runs: dict[str, list[float]] = {"decoder": [], "encoder": []}
        run = ort_backend._run

        def timed(session, binding, graph: str) -> None:
            start = time.perf_counter()
            run(session, binding, graph)
            self.runs.setdefault(graph, []).append(time.perf_counter() - start)

        monkeypatch.setattr(ort_backend, "_run", timed)

    def in_turns(self, systems: dict[str, Summarizer], text: str, options: dict, rounds: int) -> Turns:
        """Each of `systems` summarizes `text` with `options` `rounds` times, in turns (the order reversed every
        other round)."""
        turns = Turns({key: [] for key in systems}, {key: [] for key in systems}, {key: [] for key in systems})
        for index in range(rounds):
            for key in list(systems) if index % 2 == 0 else list(systems)[::-1]:
                for runs in self.runs.values():
                    runs.clear()
                summary = systems[key].summarize(text, **options)
                decoder = self.runs["decoder"]
                turns.graph_ms[key].append(1000 * float(np.median(decoder)))
                turns.encoder_ms[key].append(1000 * sum(self.runs["encoder"]))
                turns.step_ms[key].append(1000 * summary.timings["decode"] / len(decoder))
                turns.tokens[key] = summary.token_ids
        return turns
