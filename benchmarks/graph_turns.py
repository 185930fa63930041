"""Bundles set side by side on the same pages in one run, taking turns, with their graphs' runs timed inside the
ONNX Runtime backend: what `test_fused_step.py` and `test_merged_adapters.py` print."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from benchmarks.test_peers import LOCSUM_OPTIONS, THREADS, inputs
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
    """Every graph run of every Summarizer in the process timed, by graph name, while the monkeypatch holds; the
    bundles compared loaded at `threads`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, bundles: dict[str, str | Path], threads: int = THREADS):
        self.runs: dict[str, list[float]] = {"decoder": [], "encoder": []}
        run = ort_backend._run

        def timed(session, binding, graph: str) -> None:
            start = time.perf_counter()
            run(session, binding, graph)
            self.runs.setdefault(graph, []).append(time.perf_counter() - start)

        encoded = ort_backend.OnnxRuntimeBackend.encoded

        def timed_encoded(backend, inputs):  # units encoded alone, by the run (the unit-row session's way)
            start = time.perf_counter()
            outputs = encoded(backend, inputs)
            self.runs["encoder"].append(time.perf_counter() - start)
            return outputs

        monkeypatch.setattr(ort_backend, "_run", timed)
        monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "encoded", timed_encoded)
        self.systems = {key: Summarizer.from_pretrained(path, threads=threads, verify=False)
                        for key, path in bundles.items()}

    def each_input(self, quick: bool, rounds: int) -> Iterator[tuple[str, Turns]]:
        """The peers benchmark's inputs (`test_peers.inputs`) at its options (greedy, exactly its new tokens), each
        summarized in turns: (the input's name, its turns)."""
        for name, text, options in inputs(quick):
            yield name, self.in_turns(text, {**options, **LOCSUM_OPTIONS}, rounds)

    def in_turns(self, text: str, options: dict, rounds: int) -> Turns:
        """Each bundle summarizes `text` with `options` `rounds` times, in turns (the order reversed every other
        round)."""
        systems = self.systems
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
