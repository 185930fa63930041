"""Extractive oracle: the snippets whose union best matches the reference, found greedily on the mean of ROUGE-1,
ROUGE-2 and ROUGE-L F1 (DYLE's oracle; also the hierarchical ranker's targets).

The ROUGE is rouge-score's, computed incrementally and for every candidate at once:

- tokens as rouge-score makes them (lower-cased alphanumeric runs, Porter stems of words over 3 letters);
- ROUGE-1: clipped unigram overlap; ROUGE-2: clipped bigram overlap, bigrams counted inside each snippet (the
  chosen snippets are not one running text);
- ROUGE-L: summary level (rouge-score's `rougeLsum`): the reference split into sentences, each chosen snippet a
  candidate sentence; for each reference sentence the union of its LCS positions with every chosen snippet
  (rouge-score's backtrack), hits clipped by the candidates' token counts.

Each step costs numpy work over (candidates x reference n-gram types); the LCS positions of every candidate
against every reference sentence are computed once, vectorized over candidates bucketed by length. Candidates
sharing no word with the reference never raise the score and are left out.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np
from tqdm import tqdm

from locsum_sdk.threads import usable_cpus
from locsum_sdk.units import split_sentences

BUCKET = 256  # candidates whose LCS tables are filled together (sorted by length)
POOL_FROM = 64  # cases from which `oracles` uses every CPU (below, a pool's start costs more than it saves)
WINDOW = 8  # cases per process handed out at a time, so a pool holds a window of the data, never all of it


@functools.cache
def _stemmer():
    from nltk.stem import porter

    return porter.PorterStemmer()  # as rouge-score's DefaultTokenizer(use_stemmer=True)


@functools.lru_cache(maxsize=1 << 18)
def _stem(word: str) -> str:
    return _stemmer().stem(word) if len(word) > 3 else word


def rouge_tokens(text: str) -> list[str]:
    """rouge-score's tokens of `text` (its DefaultTokenizer with the Porter stemmer), with stems cached."""
    from rouge_score import tokenize

    return [_stem(word) for word in tokenize.tokenize(text, None)]


@dataclass(frozen=True)
class OracleResult:
    indices: list[int]  # chosen snippets, in the order the greedy search took them
    scores: list[float]  # mean F1 (0 to 1) after each choice
    rouge: dict[str, float]  # F1 of rouge1, rouge2, rougeLsum of the final choice

    @property
    def score(self) -> float:
        return self.scores[-1] if self.scores else 0.0


def _lcs_hits(reference: list[int], candidates: list[list[int]]) -> np.ndarray:
    """(len(candidates), len(reference)) bool: the reference positions on the LCS of each candidate, read out as
    rouge-score reads them (match first; else step along the candidate when that keeps the longer LCS)."""
    rows = len(reference)
    hits = np.zeros((len(candidates), rows), dtype=bool)
    order = sorted(range(len(candidates)), key=lambda i: len(candidates[i]))
    ref = np.asarray(reference, dtype=np.int64)
    for first in range(0, len(order), BUCKET):
        chosen = order[first : first + BUCKET]
        cols = max(len(candidates[i]) for i in chosen)
        can = np.full((len(chosen), cols), -1, dtype=np.int64)
        for row, i in enumerate(chosen):
            can[row, : len(candidates[i])] = candidates[i]
        table = np.zeros((len(chosen), rows + 1, cols + 1), dtype=np.int32)
        for i in range(1, rows + 1):
            equal = can == ref[i - 1]  # (n, cols)
            step = np.where(equal, table[:, i - 1, :-1] + 1, table[:, i - 1, 1:])
            table[:, i, 1:] = np.maximum.accumulate(step, axis=1)
        n = np.arange(len(chosen))
        i = np.full(len(chosen), rows)
        j = np.array([len(candidates[c]) for c in chosen])
        while True:
            active = (i > 0) & (j > 0)
            if not active.any():
                break
            equal = active & (ref[np.maximum(i - 1, 0)] == can[n, np.maximum(j - 1, 0)])
            hits[np.asarray(chosen)[equal], i[equal] - 1] = True
            left = table[n, i, np.maximum(j - 1, 0)] > table[n, np.maximum(i - 1, 0), j]
            i = np.where(active & (equal | ~left), i - 1, i)
            j = np.where(active & (equal | left), j - 1, j)
    return hits


def _f1(overlap: np.ndarray, candidate: np.ndarray, reference: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(candidate > 0, overlap / np.maximum(candidate, 1), 0.0)
        recall = overlap / max(reference, 1)
        return np.where(overlap > 0, 2 * precision * recall / (precision + recall), 0.0)


def oracle(snippets: Sequence[str], reference_sentences: Sequence[str], limit: int | None = None) -> OracleResult:
    """Greedy: add the snippet that most raises mean(ROUGE-1, ROUGE-2, ROUGE-L F1) until none raises it or
    `limit` snippets are chosen. `reference_sentences`: the reference, one sentence per item."""
    tokens = [rouge_tokens(s) for s in snippets]
    ref_sents = [t for t in (rouge_tokens(s) for s in reference_sentences) if t]
    ref_words = [w for sentence in ref_sents for w in sentence]
    if not ref_words:
        return OracleResult([], [], {"rouge1": 0.0, "rouge2": 0.0, "rougeLsum": 0.0})
    vocab = {w: k for k, w in enumerate(dict.fromkeys(ref_words))}
    ref_bigrams = Counter(b for s in [ref_words] for b in zip(s, s[1:]))
    bigram_index = {b: k for k, b in enumerate(ref_bigrams)}
    ref1 = np.bincount([vocab[w] for w in ref_words], minlength=len(vocab))
    ref2 = np.array([ref_bigrams[b] for b in bigram_index], dtype=np.int64)
    useful = [i for i, t in enumerate(tokens) if any(w in vocab for w in t)]
    n = len(useful)
    unigrams = np.zeros((n, len(vocab)), dtype=np.int64)
    bigrams = np.zeros((n, max(len(bigram_index), 1)), dtype=np.int64)
    for row, i in enumerate(useful):
        for w in tokens[i]:
            if w in vocab:
                unigrams[row, vocab[w]] += 1
        for b in zip(tokens[i], tokens[i][1:]):
            if b in bigram_index:
                bigrams[row, bigram_index[b]] += 1
    length1 = np.array([len(tokens[i]) for i in useful], dtype=np.int64)
    length2 = np.maximum(length1 - 1, 0)
    # LCS positions against every reference sentence, laid end to end: (n, reference words)
    encoded = [[vocab[w] for w in sentence] for sentence in ref_sents]
    candidates = [[vocab.get(w, -2) for w in tokens[i]] for i in useful]
    hits = np.concatenate([_lcs_hits(sentence, candidates) for sentence in encoded], axis=1) if n else \
        np.zeros((0, len(ref_words)), dtype=bool)
    position_type = np.zeros((len(ref_words), len(vocab)), dtype=np.int64)  # one-hot word type per position
    position_type[np.arange(len(ref_words)), [vocab[w] for w in ref_words]] = 1

    have1, have2 = np.zeros(len(vocab), np.int64), np.zeros(bigrams.shape[1], np.int64)
    total1 = total2 = 0
    union = np.zeros(len(ref_words), dtype=bool)
    chosen: list[int] = []
    scores: list[float] = []
    available = np.ones(n, dtype=bool)
    best, rouge = 0.0, {"rouge1": 0.0, "rouge2": 0.0, "rougeLsum": 0.0}
    while available.any() and (limit is None or len(chosen) < limit):
        counts1 = have1 + unigrams  # (n, types): the candidate summary's counts of reference words
        f1 = _f1(np.minimum(counts1, ref1).sum(1), total1 + length1, len(ref_words))
        f2 = _f1(np.minimum(have2 + bigrams, ref2).sum(1), total2 + length2, int(ref2.sum()))
        union_counts = (union | hits).astype(np.int64) @ position_type  # (n, types)
        fl = _f1(np.minimum(union_counts, counts1).sum(1), total1 + length1, len(ref_words))
        mean = np.where(available, (f1 + f2 + fl) / 3, -1.0)
        pick = int(np.argmax(mean))
        if mean[pick] <= best:
            break
        best = float(mean[pick])
        rouge = {"rouge1": float(f1[pick]), "rouge2": float(f2[pick]), "rougeLsum": float(fl[pick])}
        have1, have2 = have1 + unigrams[pick], have2 + bigrams[pick]
        total1, total2 = total1 + int(length1[pick]), total2 + int(length2[pick])
        union |= hits[pick]
        available[pick] = False
        chosen.append(useful[pick])
        scores.append(best)
    return OracleResult(chosen, scores, rouge)


Case = tuple[Sequence[str], Sequence[str]]  # an example's snippets and its reference sentences


def oracles(cases: Iterable[Case], count: int, limit: int | None = None, workers: int | None = None,
            desc: str = "oracle", progress: bool = True) -> list[list[int]]:
    """The oracle's snippet indices for each of `count` cases, in order: in this process, or over `workers`
    forked processes (default: the CPUs this process may use, from `POOL_FROM` cases on), reading `cases` a window
    at a time; one tqdm bar over the cases. Where processes cannot fork, in this process: a spawned one would
    import the caller's main script again."""
    if workers is None:
        workers = usable_cpus() if count >= POOL_FROM else 1
    if "fork" not in multiprocessing.get_all_start_methods():
        workers = 1
    find = functools.partial(_indices, limit=limit)
    cases = iter(cases)
    found: list[list[int]] = []
    pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None  # numpy and Python alone
    with tqdm(total=count, desc=desc, disable=not progress) as bar, pool or contextlib.nullcontext():
        while window := list(islice(cases, max(workers, 1) * WINDOW)):
            found.extend(pool.map(find, window, chunksize=1) if pool else map(find, window))
            bar.update(len(window))
    return found


def _indices(case: Case, limit: int | None) -> list[int]:
    return oracle(case[0], case[1], limit).indices


def reference_sentences(summary: str) -> list[str]:
    """A reference summary as the sentences an oracle matches snippets against."""
    return [summary[s:e] for s, e in split_sentences(summary)]
