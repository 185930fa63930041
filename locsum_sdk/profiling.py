"""Memory and speed of a bundle against input length (`locsum bench`), and where the time goes (`locsum profile`).

A point summarizes filler text of a given token count with a fixed number of decoding steps and reports the
process's own peak RSS, the encode time and the time per decoding step. `locsum bench` runs one fresh process
per point (peak RSS only grows within a process) and fits memory against length. `locsum profile` runs one
such summary with ONNX Runtime's node tracing on and adds the kernel time up by operator type, per graph run.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .errors import BackendError, BundleError, OptionError

WORDS = (
    "the committee budget report meeting project design team market sales quarter remote control battery user "
    "interface button speech cost price plan decision agreed discussed proposed review data results model system "
    "customer product feature evaluation schedule risk delivery network energy policy city school research growth"
).split()


def filler_text(seed: int, sentences: int) -> str:
    """Random sentences over a small vocabulary: input of a controlled length, not of meaning."""
    rng = random.Random(seed)
    return " ".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "." for _ in range(sentences)
    )


def text_of_tokens(tokenizer, tokens: int, seed: int = 0) -> str:
    """Filler sentences totalling about `tokens` tokens of `tokenizer` (as the paging code counts them)."""
    per_sentence = len(tokenizer.encode(" " + filler_text(seed, 200), add_special_tokens=False).ids) / 200
    if per_sentence < 1:
        raise BundleError(
            f"the bundle's tokenizer makes {per_sentence:.3f} tokens of a filler sentence (it does not split English "
            "words), so no input of a given token length can be written for it; use a bundle whose tokenizer does"
        )
    return filler_text(seed, max(1, round(tokens / per_sentence)))


def rss_mb() -> float | None:
    """This process's resident set size now (Linux; None elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


def peak_rss_mb() -> float | None:
    """This process's peak resident set size, as the OS accounts it (None where it cannot say).

    On Linux it is the high-water mark of the process's own memory (`VmHWM`). `getrusage`'s `ru_maxrss` would
    not do there: it survives `exec`, so a fresh process started from a large one (a benchmark run that has
    loaded models) reports at least its parent's size at the fork."""
    try:
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) / 1024 for line in handle if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        pass
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


MAX_TOKENS = 2**24  # longest filler input `locsum bench` and `locsum profile` write


@dataclass
class Point:
    """One measured input length."""

    target_tokens: int
    tokens: int  # tokens in the units actually summarized
    pages: int
    steps: int  # decoding steps run (the summary may keep fewer tokens: `counted_steps`)
    peak_rss_mb: float | None
    loaded_rss_mb: float | None  # RSS once the bundle is loaded, before the input: peak minus this is working memory
    encode_seconds: float
    step_ms: float  # decoding time per step
    token_ids: list[int]
    estimate_mb: float | None = None  # loaded RSS + the working memory the call estimated before encoding
    select_seconds: float = 0.0  # the kind's selection stage (DYLE's extractor), before encoding


def measure(path: str | None, tokens: int, steps: int = 32, num_beams: int = 1, backend: str = "auto",
            threads: int | None = None) -> Point:
    """Summarize `tokens` tokens of filler text with exactly `steps` decoding steps, in this process."""
    from .summarizer import Summarizer

    summarizer = Summarizer.from_pretrained(path, backend=backend, threads=threads, verify=False)
    text = text_of_tokens(summarizer.tokenizer, tokens)
    loaded = rss_mb()
    options = _fixed_steps(summarizer, tokens, steps, num_beams)
    with counted_steps(summarizer) as run:
        summary = summarizer.summarize(text, **options)
    working = summarizer.estimate_memory([summary.units], summarizer.options(**options).generation).total / 2**20
    return Point(tokens, sum(len(u.token_ids) for u in summary.units), len(summary.units), run[0],
                 peak_rss_mb(), loaded, summary.timings["encode"], step_ms(summary, run[0]),
                 list(summary.token_ids), None if loaded is None else loaded + working, summary.timings["select"])


def _fixed_steps(summarizer, tokens: int, steps: int, num_beams: int) -> dict:
    """Options that decode exactly `steps` steps of an input of about `tokens` tokens, never refused for its
    length by `max_tokens` (the memory limit still applies)."""
    return dict(num_beams=num_beams, max_length=steps + 1, min_length=steps + 1,
                max_tokens=max(summarizer.limits.max_tokens, 2 * tokens))


def measure_in_fresh_process(path: str | None, tokens: int, steps: int = 32, num_beams: int = 1,
                             backend: str = "auto", threads: int | None = None) -> Point:
    """`measure` in a new Python process, so that its peak RSS belongs to this point alone."""
    command = [sys.executable, "-m", "locsum_sdk.profiling", "--tokens", str(tokens), "--steps", str(steps),
               "--num-beams", str(num_beams), "--backend", backend]
    if path is not None:
        command += ["--bundle", str(path)]
    if threads is not None:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BackendError(f"measuring {tokens} tokens failed in its process:\n{done.stderr.strip()[-2000:]}")
    return Point(**json.loads(done.stdout.strip().splitlines()[-1]))


@dataclass
class OpTime:
    """The kernels of one operator type (or one node) in one graph, per run of that graph."""

    name: str  # operator type, or node name when profiled by node
    calls: float  # kernels run, per graph run
    ms: float  # their time, per graph run


@dataclass
class GraphProfile:
    """Where one graph's run time went, averaged over its runs."""

    graph: str
    runs: int
    run_ms: float  # wall time of a run, as ONNX Runtime timed it
    kernel_ms: float  # the kernels' share of it; the rest is the framework (binding, allocation, scheduling)
    ops: list[OpTime]  # slowest first


CONTROL_FLOW = ("If", "Loop", "Scan")  # their subgraphs' nodes are traced themselves: not counted twice


def read_trace(graph: str, trace: Path, by_node: bool = False) -> GraphProfile:
    """Sum an ONNX Runtime trace (Chrome trace JSON) by operator type (or by node), per run of the graph. A
    control-flow node's time is its subgraph's nodes', which are summed as they are (its own bookkeeping falls in the
    time outside the kernels)."""
    events = json.loads(trace.read_text())
    runs = [e["dur"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    if not runs:
        raise BackendError(f"{trace} has no run of the {graph}; nothing was profiled")
    calls: dict[str, int] = defaultdict(int)
    micros: dict[str, float] = defaultdict(float)
    suffix = "_kernel_time"
    for event in events:
        if (event.get("cat") == "Node" and event.get("name", "").endswith(suffix)
                and event["args"]["op_name"] not in CONTROL_FLOW):
            key = event["name"][: -len(suffix)] if by_node else event["args"]["op_name"]
            calls[key] += 1
            micros[key] += event["dur"]
    ops = sorted((OpTime(k, calls[k] / len(runs), micros[k] / 1000 / len(runs)) for k in calls), key=lambda o: -o.ms)
    return GraphProfile(graph, len(runs), sum(runs) / 1000 / len(runs), sum(o.ms for o in ops), ops)


@dataclass
class Profile:
    """A traced summary: each graph's profile, and the decoding loop's time a step beside the decoder graph's."""

    graphs: list[GraphProfile]  # encoder, decoder
    steps: int  # decoding steps run
    step_ms: float  # the decoding loop's wall time a step: the decoder graph's run and everything around it
    untraced_step_ms: float  # the same summary's time a step with tracing off: what tracing adds is the difference

    @property
    def outside_ms(self) -> float:
        """A step's time outside the decoder graph's run: the search, the decoding options, binding the inputs."""
        decoder = next(g for g in self.graphs if g.graph == "decoder")
        return max(self.step_ms - decoder.run_ms, 0.0)

    def to_dict(self) -> dict:
        return {"graphs": [asdict(g) for g in self.graphs],
                "decoding": {"steps": self.steps, "step_ms": self.step_ms, "outside_ms": self.outside_ms,
                             "outside_share": self.outside_ms / self.step_ms if self.step_ms else 0.0,
                             "untraced_step_ms": self.untraced_step_ms}}


def op_profile(path: str | None, tokens: int, steps: int = 32, num_beams: int = 1, threads: int | None = None,
               by_node: bool = False) -> Profile:
    """Summarize `tokens` tokens of filler text in exactly `steps` steps with node tracing on; encoder and decoder,
    and the decoding loop's time a step. The same summary runs first with tracing off, on sessions as newly loaded
    as the traced ones, so the report can say how much the tracing itself adds to a step."""
    from .backends.onnxruntime import OnnxRuntimeBackend
    from .summarizer import Summarizer

    summarizer = Summarizer.from_pretrained(path, backend="onnxruntime", threads=threads, verify=False)
    text = text_of_tokens(summarizer.tokenizer, tokens)
    options = _fixed_steps(summarizer, tokens, steps, num_beams)
    with counted_steps(summarizer) as run:
        untraced = summarizer.summarize(text, **options)
    with tempfile.TemporaryDirectory(prefix="locsum-profile-") as directory:
        traced = OnnxRuntimeBackend(summarizer.backend.bundle, threads, profile_dir=Path(directory))
        summarizer.backend = traced
        with counted_steps(summarizer) as traced_run:
            summary = summarizer.summarize(text, **options)
        graphs = [read_trace(graph, trace, by_node) for graph, trace in traced.end_profiling().items()]
    return Profile(graphs, traced_run[0], step_ms(summary, traced_run[0]), step_ms(untraced, run[0]))


@contextmanager
def counted_steps(summarizer) -> Iterator[list[int]]:
    """Within the block, the decoding steps the summarizer's backend runs, counted in the list's one item: a
    summary may keep fewer tokens than its steps (`whole_sentences` and `known_words` cut its end), so its tokens
    do not count its steps."""
    count = [0]
    backend = summarizer.backend
    start = backend.start

    def counted_start(*args, **kwargs):
        session = start(*args, **kwargs)
        step = session.step

        def counted_step(*step_args, **step_kwargs):
            count[0] += 1
            return step(*step_args, **step_kwargs)

        session.step = counted_step
        return session

    backend.start = counted_start
    try:
        yield count
    finally:
        del backend.start  # the backend's own method again


def step_ms(summary, steps: int) -> float:
    """A summary's decoding time a step (of `steps`, at least one), in ms."""
    return 1000 * summary.timings["decode"] / max(steps, 1)


def linear_fit(points: list[Point]) -> tuple[float, float] | None:
    """Least-squares (MB per 1k tokens, MB at zero tokens) of peak RSS against tokens; None below two lengths."""
    rows = [(p.tokens / 1000, p.peak_rss_mb) for p in points if p.peak_rss_mb is not None]
    if len({x for x, _ in rows}) < 2:
        return None
    slope, intercept = np.polyfit(*zip(*rows), 1)
    return float(slope), float(intercept)


def parse_lengths(text: str) -> list[int]:
    """'2000,8k,32k' -> [2000, 8000, 32000]."""
    lengths = []
    for part in filter(None, (p.strip().lower() for p in text.split(","))):
        try:
            value = float(part[:-1]) * 1000 if part.endswith("k") else float(part)
        except ValueError:
            raise OptionError(f"input length {part!r} is not a number; write lengths like 2000,8k,32k") from None
        if not math.isfinite(value) or not 1 <= value <= MAX_TOKENS:
            raise OptionError(f"input length {part!r} must be a number of tokens from 1 to {MAX_TOKENS:,}")
        lengths.append(int(value))
    if not lengths:
        raise OptionError("no input lengths given; write lengths like 2000,8k,32k")
    return lengths


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="one measured point, printed as JSON (used by `locsum bench`)")
    parser.add_argument("--bundle")
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--num-beams", type=int, default=1)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    point = measure(args.bundle, args.tokens, args.steps, args.num_beams, args.backend, args.threads)
    sys.stdout.write(json.dumps(asdict(point)) + "\n")  # the one line the parent process reads


if __name__ == "__main__":
    main()
