"""ROUGE evaluation as the papers report it, with bootstrap intervals, the extractive baselines, and input-specific
words per summary.

ROUGE-1/2/L and ROUGE-Lsum F1 from `rouge-score` with stemming; Lsum sees one sentence per line. Intervals are
95% percentile bootstrap over examples. Baselines: lead (the first N source words, N = the reference's length),
random sentences (up to N words), and the greedy extractive oracle (sentences added while ROUGE-1 + ROUGE-2
against the reference still improves; an upper bound for extraction).

Input-specific words per summary: ROUGE rewards the words every summary shares; this counts the ones that say
what this input was about. Lowercase the text and take its words of four or more letters; a word is specific to an
input when the input (its documents) contains it and fewer than 15% of the evaluation set's other distinct inputs
do. A summary's count is its distinct words specific to its own input; the references are counted the same way.

Made-up words per summary: its distinct words of four or more letters that no input, query or reference of the
evaluation set holds, nor the `known` words given (e.g. the words of every split of the training data; for a model
on a pretrained backbone also its vocabulary's whole words, `vocabulary_words`, real English no training text need
hold). A model that strings copied subword pieces into words no text holds ("Ganymedriveration") shows here, where
neither ROUGE nor input-specific words sees it; extractive baselines score 0 by construction.

Words repeated: the share (percent) of a summary's words of four or more letters, in order, that repeat an earlier
word of the same summary ("the budget of the budget": 50). A summary that loops on a few words scores high where
ROUGE barely moves; references score about 14 on QMSum.

Specific words also in the reference: a summary's input-specific words that its reference holds too, the facts of
this input that a person also chose to write; the references' own row counts their input-specific words.

Distinct summaries: the share (percent) of a system's summaries that no example with another input or query
repeats, compared lowercased with whitespace collapsed; a model that writes one summary for every input scores 0.
Examples that repeat one input and query (L-Eval holds 30 such repeats in 218 examples) may share their summary:
a deterministic summarizer cannot do otherwise, and the references do the same.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BackendUnavailableError, DataError, OptionError
from .units import split_sentences
from .words import CONTENT_LETTERS, RARE_SHARE, WORD, content_words, piece_texts

logger = logging.getLogger("locsum_sdk")

METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
SPECIFIC = "specific_words"  # input-specific words per summary, reported beside ROUGE
MADE_UP = "made_up_words"  # words per summary that no text of the set (nor the known words) holds
DISTINCT = "distinct"  # percent of summaries that no example with another input or query repeats
REPEATED = "repeated_words"  # percent of a summary's words of 4+ letters that repeat an earlier one of it
SHARED = "specific_in_reference"  # input-specific words of a summary that its reference holds too
REFERENCE = "reference"  # the row of the references' own input-specific words and distinct share
BASELINES = ("lead", "random", "oracle")


@dataclass(frozen=True)
class EvalExample:
    id: str
    documents: list[str]
    query: str | None
    reference: str


def read_examples(path: str | Path, limit: int | None = None) -> list[EvalExample]:
    """Examples of a JSON Lines file with the schema of ../shared/data (`documents`, `query`, `summary`; `id`
    optional). A line that is not such an example raises a DataError naming `file:line`; so does an empty file.

    Args:
        limit: read the first `limit` examples only (None: all; otherwise at least 1).
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise OptionError(f"limit={limit!r}: give a number of examples of at least 1, or None for all")
    out = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if raw.strip():
                out.append(_example(raw, f"{path}:{number}", number))
                if limit and len(out) >= limit:
                    break
    if not out:
        raise DataError(f"{path} holds no examples; give a JSON Lines file with one example per line")
    return out


def _example(raw: bytes, where: str, number: int) -> EvalExample:
    row = parse_line(raw, where, number)
    return EvalExample(row["id"], row["documents"], row["query"], row["summary"])


def parse_line(raw: bytes, where: str, number: int, require_summary: bool = True) -> dict[str, Any]:
    """Line `number` of a data file (`documents`: a string or a non-empty list of strings, `summary`: a non-empty
    string, `query`: a string or null; `id` and `source` optional), checked; a DataError naming `where` otherwise.
    Returns the row with `documents` as a list, and `query`, `source` and `id` (a string, `line-N` by default)
    present. Text for pretraining (`require_summary=False`) may leave `summary` out; it is then ""."""
    try:
        row = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{where}: not a JSON line ({err})") from None
    if not isinstance(row, dict):
        raise DataError(f"{where}: a JSON {type(row).__name__}, not an object with documents and summary")
    documents, summary, query = row.get("documents"), row.get("summary", None if require_summary else ""), \
        row.get("query")
    if isinstance(documents, str):
        documents = [documents]
    if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
        raise DataError(f"{where}: 'documents' must be a non-empty list of strings")
    if not isinstance(summary, str):
        raise DataError(f"{where}: 'summary' must be a string (the reference summary)")
    if require_summary and not summary.strip():
        raise DataError(f"{where}: 'summary' is empty; every example needs a reference summary")
    if query is not None and not isinstance(query, str):
        raise DataError(f"{where}: 'query' must be a string or null")
    source = row.get("source", "")
    if not isinstance(source, str):
        raise DataError(f"{where}: 'source' must be a string")
    for field, text in [("documents", d) for d in documents] + [("summary", summary), ("query", query or "")]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise DataError(f"{where}: '{field}' holds a lone surrogate (a broken \\u escape at character "
                            f"{err.start}); fix the line") from None
    return {**row, "id": str(row.get("id", f"line-{number}")), "documents": documents, "summary": summary,
            "query": query, "source": source}


def _sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text)]


def rouge_scores(predictions: Sequence[str], references: Sequence[str]) -> list[dict[str, float]]:
    """Per-example F1 (in percent) of every metric."""
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise BackendUnavailableError("ROUGE needs rouge-score: pip install 'locsum[eval]'") from None
    scorer = rouge_scorer.RougeScorer(list(METRICS), use_stemmer=True)
    rows = []
    for prediction, reference in zip(predictions, references):
        scores = scorer.score("\n".join(_sentences(reference)), "\n".join(_sentences(prediction)))
        rows.append({m: 100 * scores[m].fmeasure for m in METRICS})
    return rows


def interval(values: Sequence[float], rng: np.random.Generator, samples: int = 1000) -> dict[str, float]:
    """Mean and 95% percentile-bootstrap interval of `values`, resampled `samples` times with `rng`."""
    values = np.asarray(values, dtype=np.float64)
    means = values[rng.integers(0, len(values), (samples, len(values)))].mean(axis=1)
    return {"mean": float(values.mean()), "low": float(np.percentile(means, 2.5)),
            "high": float(np.percentile(means, 97.5))}


def bootstrap(rows: list[dict[str, float]], samples: int = 1000, seed: int = 0) -> dict[str, dict[str, float]]:
    """Mean and 95% percentile-bootstrap interval of every metric."""
    rng = np.random.default_rng(seed)
    return {metric: interval([r[metric] for r in rows], rng, samples) for metric in METRICS}


def lead(example: EvalExample, words: int, rng: random.Random) -> str:
    return " ".join(" ".join(example.documents).split()[:words])


def random_sentences(example: EvalExample, words: int, rng: random.Random) -> str:
    sentences = [s for doc in example.documents for s in _sentences(doc)]
    rng.shuffle(sentences)
    chosen, count = [], 0
    for sentence in sentences:
        if count >= words:
            break
        chosen.append(sentence)
        count += len(sentence.split())
    return "\n".join(chosen)


def _grams(tokens: list[str], n: int) -> Counter:
    return Counter(zip(*(tokens[i:] for i in range(n))))


def _f1(overlap: int, candidate: int, reference: int) -> float:
    """F1 from the n-gram overlap and the two n-gram totals."""
    if not overlap:
        return 0.0
    precision, recall = overlap / candidate, overlap / reference
    return 2 * precision * recall / (precision + recall)


class _Overlap:
    """The chosen sentences' n-grams against the reference's, updated as sentences are added."""

    def __init__(self, reference: Counter):
        self.reference, self.have, self.overlap, self.total = reference, Counter(), 0, 0
        self.reference_total = sum(reference.values())

    def gain(self, grams: Counter) -> int:
        """How much the clipped overlap grows if `grams` (already restricted to the reference's) are added."""
        ref, have = self.reference, self.have
        return sum(min(have[g] + c, ref[g]) - min(have[g], ref[g]) for g, c in grams.items())

    def f1_with(self, grams: Counter, total: int) -> float:
        return _f1(self.overlap + self.gain(grams), self.total + total, self.reference_total)

    def add(self, grams: Counter, total: int) -> None:
        self.overlap += self.gain(grams)
        self.total += total
        self.have.update(grams)


def oracle(example: EvalExample, words: int, rng: random.Random) -> str:
    """Greedy extractive oracle on lower-cased unigrams + bigrams (the usual approximation of ROUGE-1 + 2)."""
    sentences = [s for doc in example.documents for s in _sentences(doc)]
    tokens = [s.lower().split() for s in sentences]
    ref = example.reference.lower().split()
    scores = [_Overlap(_grams(ref, 1)), _Overlap(_grams(ref, 2))]
    grams = []  # per sentence and n: (its n-grams that the reference has, its n-gram count)
    for t in tokens:
        counted = [_grams(t, 1), _grams(t, 2)]
        grams.append([(Counter({g: c for g, c in k.items() if g in o.reference}), sum(k.values()))
                      for k, o in zip(counted, scores)])
    chosen: list[int] = []
    best = 0.0
    while True:
        gains = [(sum(o.f1_with(*g) for o, g in zip(scores, grams[i])), i)
                 for i, t in enumerate(tokens) if i not in chosen and t]
        if not gains:
            break
        score, index = max(gains)
        if score <= best:
            break
        best = score
        chosen.append(index)
        for o, g in zip(scores, grams[index]):
            o.add(*g)
    return "\n".join(sentences[i] for i in sorted(chosen))


BASELINE_FUNCTIONS: dict[str, Callable[[EvalExample, int, random.Random], str]] = {
    "lead": lead, "random": random_sentences, "oracle": oracle,
}


def run_baseline(name: str, examples: Iterable[EvalExample], seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [BASELINE_FUNCTIONS[name](ex, len(ex.reference.split()), rng) for ex in examples]


def input_specific_words(examples: Sequence[EvalExample]) -> list[set[str]]:
    """Per example, the words of its input that fewer than `RARE_SHARE` of the set's other distinct inputs contain
    (examples that share an input, such as several queries on one meeting, count it once)."""
    inputs = ["\n".join(ex.documents) for ex in examples]
    distinct = {text: content_words(text) for text in dict.fromkeys(inputs)}
    frequency = Counter(word for words in distinct.values() for word in words)
    others = len(distinct) - 1
    specific = {text: {word for word in words if frequency[word] - 1 < RARE_SHARE * others}
                for text, words in distinct.items()}
    return [specific[text] for text in inputs]


def specific_counts(summaries: Sequence[str], specific: Sequence[set[str]]) -> list[int]:
    """Input-specific words of each summary: its distinct words in its own example's `input_specific_words`."""
    return [len(content_words(summary) & words) for summary, words in zip(summaries, specific)]


def repeated_shares(summaries: Sequence[str]) -> list[float]:
    """Per summary, the percent of its words of four or more letters (lowercased, in order) that repeat an earlier
    one of it (0 for a summary without such words)."""
    shares = []
    for summary in summaries:
        words = [word for word in WORD.findall(summary.lower()) if len(word) >= CONTENT_LETTERS]
        seen: set[str] = set()
        repeats = 0
        for word in words:
            repeats += word in seen
            seen.add(word)
        shares.append(100.0 * repeats / len(words) if words else 0.0)
    return shares


def shared_counts(summaries: Sequence[str], specific: Sequence[set[str]], references: Sequence[str]) -> list[int]:
    """Per summary, its input-specific words that its reference also holds."""
    return [len(content_words(summary) & words & content_words(reference))
            for summary, words, reference in zip(summaries, specific, references)]


def set_words(examples: Sequence[EvalExample]) -> set[str]:
    """The words (as `content_words`) of every input, query and reference of `examples`."""
    words: set[str] = set()
    for ex in examples:
        words |= content_words("\n".join([*ex.documents, ex.query or "", ex.reference]))
    return words


def vocabulary_words(tokenizer) -> frozenset[str]:
    """The whole words of a vocabulary (`tokenizers.Tokenizer`): pieces that start a word (byte-level BPE's "Ġ",
    SentencePiece's "▁", a WordPiece without "##") and are letters alone, as `content_words` reads them; none for a
    tokenizer that marks no word starts. A pretrained model learnt them as words, so its summaries' use of them is
    not made up."""
    try:
        texts, opens, _ = piece_texts(tokenizer, None, "vocabulary_words")
    except OptionError:
        return frozenset()
    return frozenset(word for text, opened in zip(texts, opens) if opened and text.isalpha()
                     for word in content_words(text))


def made_up_counts(summaries: Sequence[str], real: set[str]) -> list[int]:
    """Made-up words of each summary: its distinct words (as `content_words`) outside `real`."""
    return [len(content_words(summary) - real) for summary in summaries]


def distinct_flags(summaries: Sequence[str], examples: Sequence[EvalExample]) -> list[float]:
    """100 for each summary that no example with another input or query repeats (lowercased, whitespace
    collapsed), else 0."""
    keys = [" ".join(summary.lower().split()) for summary in summaries]
    tasks: dict[str, set[tuple]] = {}
    for key, ex in zip(keys, examples):
        tasks.setdefault(key, set()).add((tuple(ex.documents), ex.query))
    return [100.0 if len(tasks[key]) == 1 else 0.0 for key in keys]


def evaluate(systems: dict[str, list[str]], examples: list[EvalExample], output: str | Path | None = None,
             samples: int = 1000, known: Iterable[str] = ()) -> dict[str, dict[str, dict[str, float]]]:
    """ROUGE, input-specific words (`SPECIFIC`), made-up words (`MADE_UP`; `known`: words beside the set's own that
    are real), distinct summaries (`DISTINCT`), words repeated (`REPEATED`) and specific words also in the reference
    (`SHARED`) with intervals for every system, and the references' own input-specific words, distinct share and
    words repeated (row `REFERENCE`); per-example rows (outputs and scores) to `output` as JSONL."""
    references = [ex.reference for ex in examples]
    report, per_example = {}, {}
    specific = input_specific_words(examples)  # once each: they read every input
    real = set_words(examples) | set(known)
    for name, predictions in systems.items():
        rows = rouge_scores(predictions, references)
        measures = zip(specific_counts(predictions, specific), made_up_counts(predictions, real),
                       distinct_flags(predictions, examples), repeated_shares(predictions),
                       shared_counts(predictions, specific, references))
        for row, values in zip(rows, measures):
            row.update(zip((SPECIFIC, MADE_UP, DISTINCT, REPEATED, SHARED), values))
        report[name] = {**bootstrap(rows, samples),
                        **{m: interval([r[m] for r in rows], np.random.default_rng(0), samples)
                           for m in (SPECIFIC, MADE_UP, DISTINCT, REPEATED, SHARED)}}
        per_example[name] = rows
    own = specific_counts(references, specific)
    report[REFERENCE] = {m: interval(values, np.random.default_rng(0), samples) for m, values in (
        (SPECIFIC, own), (DISTINCT, distinct_flags(references, examples)), (REPEATED, repeated_shares(references)),
        (SHARED, own))}
    if output is not None:
        with open(output, "w", encoding="utf-8") as handle:
            for i, ex in enumerate(examples):
                row = {"id": ex.id, "reference": ex.reference,
                       **{name: {"output": systems[name][i], **per_example[name][i]} for name in systems}}
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return report


def format_report(report: dict[str, dict[str, dict[str, float]]]) -> str:
    """The report as a table: a row per system, a column per metric (blank where a row has none)."""
    width = max(14, *(len(name) + 1 for name in report))
    columns = [*METRICS, SPECIFIC, MADE_UP, DISTINCT, REPEATED, SHARED]
    lines = [f"{'system':{width}s}" + "".join(f"{m:>22s}" for m in columns)]
    for name, metrics in report.items():
        cells = "".join(f"{metrics[m]['mean']:8.2f} [{metrics[m]['low']:5.2f},{metrics[m]['high']:6.2f}]"
                        if m in metrics else " " * 22 for m in columns)
        lines.append(f"{name:{width}s}{cells}")
    return "\n".join(lines)
