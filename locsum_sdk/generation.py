"""The decoding loop, the same for every kind and backend: a backend step, logit filters, a search.

Lengths count the decoder start token, as in HF `generate` for encoder-decoders: `max_length=64` yields at
most 63 generated tokens.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Protocol

import numpy as np

from .errors import OptionError
from .keywords import KeywordBeams, KeywordBonus
from .repeats import RepeatCounts, WordRepeats
from .sentences import SentenceEnds
from .units import Unit
from .validation import check_bool, check_choice, check_float, check_int, is_int
from .words import BeamWords, WordGuard

logger = logging.getLogger("locsum_sdk")

MAX_BEAMS = 64  # a wider beam costs memory for no measurable gain
MAX_LENGTH_PENALTY = 10.0  # |length_penalty| beyond this makes scores overflow on long hypotheses
LENGTH_NORMALIZATIONS = ("hf", "gnmt")
MAX_KEYWORDS = 100  # keywords favoured per input
MAX_KEYWORD_BONUS = 10.0  # a larger bonus writes nothing but keywords
MAX_REPETITION_PENALTY = 10.0  # a larger penalty forbids every token once written
MAX_WORD_REPEAT_PENALTY = 20.0  # a larger one forbids a content word once written
MAX_END_PENALTY = 20.0  # a larger one forbids ending before max_length


def length_normalized(total: float, generated: int, options: GenerationOptions) -> float:
    """A hypothesis' beam score: its summed log-probability over its length normalizer to the `length_penalty`
    power; the normalizer is the generated length (HF `generate`) or GNMT's (5 + length) / 6."""
    normalizer = generated if options.length_normalization == "hf" else (5 + generated) / 6
    return total / normalizer**options.length_penalty


@dataclass(frozen=True)
class GenerationOptions:
    """Decoding options; the same meaning as in HF `generate`."""

    num_beams: int = 4  # 1 is greedy search
    max_length: int = 128  # longest sequence, decoder start token included
    min_length: int = 0  # end-of-sequence is forbidden before this length
    length_penalty: float = 1.0  # beam score = sum log p / normalizer ** length_penalty (see length_normalization)
    length_normalization: str = "hf"  # normalizer: "hf" generated length n; "gnmt" (5 + n) / 6 (Wu et al. 2016)
    no_repeat_ngram_size: int = 0  # forbid repeating any n-gram of this size (0: off)
    ngram_word_starts: bool = False  # no_repeat_ngram_size forbids only word-opening pieces (begun words, numbers end)
    early_stopping: bool = True  # beam search stops once num_beams hypotheses are finished
    known_words: bool = False  # a word of several pieces must be a word of the input or the bundle's list (`words`)
    keywords: int = 0  # favour the input's this many most frequent uncommon words while unwritten (0: off; `keywords`)
    keyword_bonus: float = 3.0  # added to the log-probability of each unwritten keyword's next piece
    repetition_penalty: float = 1.0  # a token already written has its log-probability multiplied by this (1: off)
    word_repeat_penalty: float = 0.0  # taken from a written content word's piece per time written (0: off; `repeats`)
    end_penalty: float = 0.0  # taken from end-of-sequence's log-probability at every step: longer summaries (0: off)
    whole_sentences: bool = False  # a summary max_length cuts ends at its last full sentence (`sentences`)
    drop_unsupported: bool = False  # the text leaves out the sentences no passage of the input supports (`sources`)

    def __post_init__(self) -> None:
        check_int("num_beams", self.num_beams, 1, MAX_BEAMS)
        check_int("max_length", self.max_length, 2)  # the start token and one more
        check_int("min_length", self.min_length, 0, self.max_length if is_int(self.max_length) else None)
        check_float("length_penalty", self.length_penalty, -MAX_LENGTH_PENALTY, MAX_LENGTH_PENALTY)
        check_choice("length_normalization", self.length_normalization, LENGTH_NORMALIZATIONS)
        check_int("no_repeat_ngram_size", self.no_repeat_ngram_size, 0)
        check_bool("ngram_word_starts", self.ngram_word_starts)
        check_bool("early_stopping", self.early_stopping)
        check_bool("known_words", self.known_words)
        check_int("keywords", self.keywords, 0, MAX_KEYWORDS)
        check_float("keyword_bonus", self.keyword_bonus, 0.0, MAX_KEYWORD_BONUS)
        check_float("repetition_penalty", self.repetition_penalty, 1.0, MAX_REPETITION_PENALTY)
        check_float("word_repeat_penalty", self.word_repeat_penalty, 0.0, MAX_WORD_REPEAT_PENALTY)
        check_float("end_penalty", self.end_penalty, 0.0, MAX_END_PENALTY)
        check_bool("whole_sentences", self.whole_sentences)
        check_bool("drop_unsupported", self.drop_unsupported)


OPTION_NAMES = tuple(f.name for f in fields(GenerationOptions))


class StepSession(Protocol):
    """One batch's decoding state on a backend."""

    partial_log_probs: bool  # `step` may give only each beam's best tokens (the others -inf)

    def step(self, tokens: np.ndarray, beam_index: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """tokens (B, K) int64; beam_index (B, K): the previous beam each beam continues (None: the same one).
        Returns log-probabilities (B, K, V) float32 and unit weights (B, U, K). With `partial_log_probs`, only
        each beam's best tokens hold their log-probability and the others are -inf."""

    def full_log_probs(self) -> np.ndarray:
        """The last step's log-probabilities of every token (B, K, V)."""


@dataclass(frozen=True)
class Hypothesis:
    token_ids: list[int]  # generated tokens, without the start token, ending in eos if it was produced
    score: float  # length-normalised log-probability (greedy: the plain sum)
    unit_weights: np.ndarray  # (steps, U) the combine weights of each step of this hypothesis


@dataclass(frozen=True)
class Partial:
    """Where one input's decoding stands after a step: greedy, its tokens so far; beam search, the best finished
    hypothesis once one exists (`finished`), else the leading beam (which a later step may overtake)."""

    # the tokens and the step weights are gathered only when asked for: a greedy partial reported at every step
    # copies none of its history (beam search copies the leading beam's tokens: beams are reordered in place)
    read_tokens: Callable[[], list[int]] = field(repr=False, compare=False)
    finished: bool
    read_weights: Callable[[], np.ndarray] = field(repr=False, compare=False)
    units: tuple[Unit, ...] = ()  # the input's units, filled in where the summarizer reports the partial

    @property
    def token_ids(self) -> list[int]:
        """The tokens so far, without the start token; a finished partial's end in eos."""
        return self.read_tokens()

    @property
    def unit_weights(self) -> np.ndarray:
        """(len(token_ids), U): each token's step weights, as `Hypothesis.unit_weights`; over the input's own units
        (not a batch's padding units) once the summarizer has reported the partial."""
        weights = self.read_weights()
        return weights[:, : len(self.units)] if self.units else weights


StepCallback = Callable[[int, list[Partial]], None]  # (step, one Partial per batch item); raising stops decoding


def _until_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


SHORT_INPUT_SHARE = 0.5  # min_length never holds a summary past this share of its input's text tokens
SHORT_INPUT_FLOOR = 16  # the fewest tokens a summary may run to, however short its input


def input_lengths(options: GenerationOptions, input_tokens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each input's (min_length, max_length), (B,) int64 each: the options, fitted to the input's own text
    tokens. min_length never holds a summary past SHORT_INPUT_SHARE of its input, and max_length never lets it
    run past the input's length (or SHORT_INPUT_FLOOR tokens, the larger): a nine-word input gets a summary of at
    most 16 tokens, not 320 forced to at least 60."""
    tokens = np.asarray(input_tokens, dtype=np.int64)
    low = np.minimum(options.min_length, (tokens * SHORT_INPUT_SHARE).astype(np.int64))
    return low, np.minimum(options.max_length + 1, np.maximum(tokens, SHORT_INPUT_FLOOR) + 1)


def min_length_filter(log_probs: np.ndarray, length: int, low: np.ndarray, eos: int) -> None:
    """Forbid end-of-sequence to every item shorter than its min_length. log_probs (B, K, V), low (B,)."""
    log_probs[length < low, :, eos] = -np.inf


def end_penalty_filter(log_probs: np.ndarray, eos: int, penalty: float) -> None:
    """Take `penalty` from end-of-sequence's log-probability for every beam (B, K, V): each step's odds of ending
    divided by e**penalty, so a model that ends its summaries early writes on to its next likely end."""
    if penalty:
        log_probs[:, :, eos] -= np.float32(penalty)


def max_length_filter(log_probs: np.ndarray, length: int, high: np.ndarray, eos: int) -> None:
    """Leave only end-of-sequence to every item at its last step before its own max_length `high` (B,); an item
    whose `high` is past the option's max_length stops where every item does, at the loop's last step."""
    last = length >= high - 1
    if last.any():
        log_probs[last] = -np.inf
        log_probs[last, :, eos] = 0.0


class SeenNgrams:
    """`no_repeat_ngram_size` over one decoding loop: the positions where each (n-1)-gram starts in any beam's
    summary, added as the summaries grow, so that a beam's forbidden tokens are read where its own summary holds its
    last n-1 tokens (a step's work grows with how often those were written, not with the summary's length).

    spared (V,) bool: tokens never forbidden (`ngram_word_starts`: the pieces that continue a word or a number, so
    that a name of two pieces written after the same token twice is finished as itself, not turned into another
    word that starts alike, and a second year is not turned into another number because the first began with the
    same digits)."""

    def __init__(self, size: int, spared: np.ndarray | None = None):
        self.size, self.spared = size, spared
        self.starts: list[dict[tuple[int, ...], set[int]]] = []  # per item: (n-1)-gram -> where it starts
        self.read = 0  # how many positions of the summaries have been read: windows starting before it - n + 1

    def apply(self, log_probs: np.ndarray, sequences: np.ndarray) -> None:
        """Forbid, in place, the tokens that would repeat an n-gram already in a beam's sequence. sequences (B, K, T):
        the loop's, each call's beams continuing those of the call before."""
        size, (batch, beams, length) = self.size, sequences.shape
        if size == 0 or length < size:
            return
        if not self.starts:
            self.starts = [{} for _ in range(batch)]
        for start in range(max(self.read - size + 1, 0), length - size + 1):
            windows = sequences[:, :, start:start + size - 1].tolist()
            for b, k in np.ndindex(batch, beams):
                self.starts[b].setdefault(tuple(windows[b][k]), set()).add(start)
        self.read = length
        for b, k in np.ndindex(batch, beams):
            row = sequences[b, k]
            prefix = row[length - size + 1:].tolist()
            banned = [int(row[start + size - 1]) for start in self.starts[b].get(tuple(prefix), ())
                      if row[start:start + size - 1].tolist() == prefix]
            if self.spared is not None:
                banned = [token for token in banned if not self.spared[token]]
            log_probs[b, k, banned] = -np.inf


def repetition_penalty_filter(log_probs: np.ndarray, sequences: np.ndarray, penalty: float) -> None:
    """Multiply the log-probability of every token a beam has already written (after its start token) by `penalty`
    (HF's repetition penalty on a negative score: the token becomes less likely, once however often it was written).
    sequences (B, K, T)."""
    if penalty == 1.0 or sequences.shape[-1] < 2:
        return
    batch, beams, vocab = log_probs.shape
    written = sequences[:, :, 1:].reshape(batch * beams, -1)
    rows = np.repeat(np.arange(batch * beams), written.shape[1])
    flat = log_probs.reshape(batch * beams, vocab)
    flat[rows, written.reshape(-1)] *= np.float32(penalty)  # a token written twice is indexed twice, scaled once


class TokenRows:
    """Each beam's tokens so far, (B, K, T) from the start token on, in a buffer that doubles when full: a step's
    tokens are written in place (what was written is copied only when the buffer grows), and beams are reordered by
    copying only the rows whose beam changed."""

    def __init__(self, batch: int, beams: int, start: int):
        self._buffer = np.full((batch, beams, 64), start, dtype=np.int64)
        self.length = 1

    @property
    def array(self) -> np.ndarray:
        """(B, K, T): a view, valid until the next `append`."""
        return self._buffer[:, :, :self.length]

    def append(self, tokens: np.ndarray, source: np.ndarray | None = None) -> None:
        """Each beam's next token (B, K), after reordering the beams by `source` (B, K): beam k continues beam
        source[b, k] of the step before (None: each its own)."""
        if source is not None:
            moved = source != np.arange(source.shape[1])
            if moved.any():
                items, beams = np.nonzero(moved)
                self._buffer[items, beams, :self.length] = self._buffer[items, source[items, beams], :self.length]
        if self.length == self._buffer.shape[-1]:
            self._buffer = np.concatenate([self._buffer, np.empty_like(self._buffer)], axis=-1)
        self._buffer[:, :, self.length] = tokens
        self.length += 1


class GreedySearch:
    def __init__(self, batch: int, start: int, eos: int, pad: int):
        self.eos, self.pad = eos, pad
        self.rows = TokenRows(batch, 1, start)
        self.scores = np.zeros(batch)
        self.done = np.zeros(batch, dtype=bool)
        self.weights: list[np.ndarray] = []  # per step (B, U)

    def update(self, log_probs: np.ndarray, unit_weights: np.ndarray, length: int) -> np.ndarray | None:
        tokens = log_probs[:, 0].argmax(-1)  # (B,)
        self.scores += np.where(self.done, 0.0, log_probs[np.arange(len(tokens)), 0, tokens])
        tokens = np.where(self.done, self.pad, tokens)
        self.weights.append(unit_weights[:, :, 0])
        self.rows.append(tokens[:, None])
        self.done |= tokens == self.eos
        return None

    @property
    def sequences(self) -> np.ndarray:
        """(B, 1, T): each item's tokens so far, from the start token on."""
        return self.rows.array

    @property
    def finished(self) -> bool:
        return bool(self.done.all())

    def partial(self, b: int) -> Partial:
        rows, steps, length, eos = self.rows, self.weights, len(self.weights), self.eos  # greedy rows only grow

        def tokens() -> list[int]:
            return _until_eos(rows.array[b, 0, 1: length + 1].tolist(), eos)

        return Partial(tokens, bool(self.done[b]), lambda: np.stack([step[b] for step in steps[: len(tokens())]]))

    def finalize(self) -> list[Hypothesis]:
        weights = np.stack(self.weights, axis=1)  # (B, T, U)
        out = []
        for b, seq in enumerate(self.sequences[:, 0, 1:].tolist()):
            n = seq.index(self.eos) + 1 if self.eos in seq else len(seq)
            out.append(Hypothesis(seq[:n], float(self.scores[b]), weights[b, :n]))
        return out


class BeamSearch:
    """HF-style beam search: 2K candidates per step, finished hypotheses kept per batch item.

    The step weights are kept as each step gave them, with the beam each beam continued (`parents`): a step stores
    (B, K, U) and reorders nothing, and a hypothesis' weights are read back along its beams only when asked for."""

    def __init__(self, batch: int, start: int, eos: int, options: GenerationOptions):
        self.k, self.eos, self.options = options.num_beams, eos, options
        self.rows = TokenRows(batch, self.k, start)
        self.beam_scores = np.full((batch, self.k), -1e9)  # (B, K)
        self.beam_scores[:, 0] = 0.0
        self.step_weights: list[np.ndarray] = []  # per step (B, K, U), the beams as they stood at that step
        self.parents: list[np.ndarray] = []  # per step (B, K): the beam of that step each new beam continued
        self.hypotheses: list[list[tuple[float, list[int], tuple[int, int]]]] = [[] for _ in range(batch)]
        self.done = np.zeros(batch, dtype=bool)

    def _score(self, total: float, generated: int) -> float:
        return length_normalized(total, generated, self.options)

    def _add(self, b: int, total: float, tokens: list[int], last: tuple[int, int]) -> None:
        """A finished hypothesis of item b whose last step was beam `last[1]` of step `last[0]`."""
        hyps = self.hypotheses[b]
        hyps.append((self._score(total, len(tokens)), tokens, last))
        hyps.sort(key=lambda h: -h[0])
        del hyps[self.k :]

    def _weights(self, b: int, step: int, beam: int) -> np.ndarray:
        """(step + 1, U): the step weights of item b's beam `beam` of step `step`, back to the first step."""
        rows = []
        for t in range(step, -1, -1):
            rows.append(self.step_weights[t][b, beam])
            if t:
                beam = int(self.parents[t - 1][b, beam])
        return np.stack(rows[::-1])

    def _current(self, b: int, beam: int) -> tuple[int, int]:
        """Where beam `beam` of item b, as the last step left it, last stood: (step, beam of that step)."""
        return len(self.parents) - 1, int(self.parents[-1][b, beam])

    def update(self, log_probs: np.ndarray, unit_weights: np.ndarray, length: int) -> np.ndarray:
        batch, k, vocab = log_probs.shape
        self.step_weights.append(unit_weights.transpose(0, 2, 1))  # (B, K, U)
        step = len(self.step_weights) - 1
        scores = (log_probs + self.beam_scores[:, :, None]).reshape(batch, k * vocab)  # (B, K*V)
        top = np.argpartition(-scores, 2 * k, axis=1)[:, : 2 * k]
        order = np.take_along_axis(scores, top, 1).argsort(axis=1, kind="stable")[:, ::-1]
        top = np.take_along_axis(top, order, 1)  # (B, 2K), best first
        source = np.zeros((batch, k), dtype=np.int64)
        tokens = np.full((batch, k), self.eos, dtype=np.int64)
        new_scores = np.full((batch, k), -1e9)
        for b in range(batch):
            if self.done[b]:
                continue
            filled = 0
            for rank, flat in enumerate(top[b]):
                beam, token, total = int(flat // vocab), int(flat % vocab), float(scores[b, flat])
                if token == self.eos:
                    if rank < k:
                        seq = self.sequences[b, beam, 1:].tolist() + [token]
                        self._add(b, total, seq, (step, beam))
                    continue
                source[b, filled], tokens[b, filled], new_scores[b, filled] = beam, token, total
                filled += 1
                if filled == k:
                    break
            self.done[b] = self._is_done(b, new_scores[b].max(), length)
        self.rows.append(tokens, source)
        self.parents.append(source)
        self.beam_scores = new_scores
        return source

    @property
    def sequences(self) -> np.ndarray:
        """(B, K, T): each beam's tokens so far, from the start token on."""
        return self.rows.array

    def _is_done(self, b: int, best_running: float, length: int) -> bool:
        hyps = self.hypotheses[b]
        if len(hyps) < self.k:
            return False
        if self.options.early_stopping:
            return True
        return hyps[-1][0] >= self._score(best_running, length)

    @property
    def finished(self) -> bool:
        return bool(self.done.all())

    def partial(self, b: int) -> Partial:
        if self.hypotheses[b]:
            _, tokens, last = self.hypotheses[b][0]
            return Partial(lambda: list(tokens), True, lambda: self._weights(b, *last))
        leading = self._current(b, 0)  # beams are kept best first
        row = self.sequences[b, 0, 1:].copy()  # the beams' rows are reordered in place as they go on
        return Partial(row.tolist, False, lambda: self._weights(b, *leading))

    def finalize(self) -> list[Hypothesis]:
        for b in np.flatnonzero(~self.done):
            for beam in range(self.k):
                sequence = self.sequences[b, beam, 1:].tolist()
                self._add(b, float(self.beam_scores[b, beam]), sequence, self._current(b, beam))
        return [Hypothesis(tokens, score, self._weights(b, *last))
                for b, (score, tokens, last) in enumerate(h[0] for h in self.hypotheses)]


def _filter(log_probs: np.ndarray, sequences: np.ndarray, length: int, options: GenerationOptions, eos: int,
            guard: WordGuard | None, needed: int, complete: bool, lengths: tuple[np.ndarray, np.ndarray],
            ngrams: SeenNgrams) -> None:
    """Every logit filter, in place: min_length, end_penalty, repetition_penalty, no_repeat_ngram_size, known words,
    then each input's max_length (an input at its max_length ends there, as every input does at the option's)."""
    min_length_filter(log_probs, length, lengths[0], eos)
    end_penalty_filter(log_probs, eos, options.end_penalty)
    repetition_penalty_filter(log_probs, sequences, options.repetition_penalty)
    ngrams.apply(log_probs, sequences)
    if guard is not None:
        guard.apply(log_probs, sequences, needed, complete)
    max_length_filter(log_probs, length, lengths[1], eos)


def generate(session: StepSession, batch: int, options: GenerationOptions, start: int, eos: int, pad: int,
             on_step: StepCallback | None = None, guard: WordGuard | None = None,
             bonus: KeywordBonus | None = None, input_tokens: Sequence[int] | None = None,
             repeats: WordRepeats | None = None, sentences: SentenceEnds | None = None,
             word_pieces: np.ndarray | None = None) -> list[Hypothesis]:
    """Run the decoding loop on one batch and return the best hypothesis of each batch item. `on_step` is called
    after every step with where each item stands; an exception it raises stops the loop and propagates. `guard`:
    the `known_words` filter of this batch, `bonus` its `keywords` (None: off), `repeats` the tokenizer's
    `word_repeat_penalty` filter (read only when the option is on), `sentences` its `whole_sentences` ends (likewise),
    `word_pieces` (V,) bool the pieces that continue a word or a number, which `ngram_word_starts` spares (likewise);
    `input_tokens`: each item's input length in text tokens, which bounds its min_length and max_length
    (`input_lengths`; None: the options').

    A step chooses at most 2K continuations (beam search) or one (greedy), and a beam's are among its 2K (or 1)
    best tokens that the filters leave; so a session giving only each beam's best tokens decides the same,
    unless the filters leave a beam fewer than that: then the step reads the full log-probabilities. With
    keywords every step reads them (a keyword's next piece may be outside a beam's best before its bonus), and with
    a repetition or word repeat penalty (a penalized token may fall below one outside a beam's best); with an end
    penalty, every step where end-of-sequence is among a beam's best."""
    if options.known_words and guard is None:
        raise OptionError("known_words needs each input's words and the tokenizer's pieces: summarize through a "
                          "Summarizer, or turn known_words off")
    if options.keywords and bonus is None:
        raise OptionError("keywords needs each input's text and the bundle's common words: summarize through a "
                          "Summarizer, or set keywords=0")
    if options.word_repeat_penalty and repeats is None:
        raise OptionError("word_repeat_penalty needs the tokenizer's pieces: summarize through a Summarizer, or set "
                          "word_repeat_penalty=0")
    if options.whole_sentences and sentences is None:
        raise OptionError("whole_sentences needs the tokenizer's pieces: summarize through a Summarizer, or turn "
                          "whole_sentences off")
    if options.ngram_word_starts and word_pieces is None:
        raise OptionError("ngram_word_starts needs the tokenizer's pieces: summarize through a Summarizer, or turn "
                          "ngram_word_starts off")
    ngrams = SeenNgrams(options.no_repeat_ngram_size, word_pieces if options.ngram_word_starts else None)
    if options.num_beams == 1:
        search = GreedySearch(batch, start, eos, pad)
    else:
        search = BeamSearch(batch, start, eos, options)
    beam_index = None
    followers: list[KeywordBeams | RepeatCounts] = []  # what the filters read of each beam's words, step by step
    if bonus is not None:
        followers.append(bonus.follow(batch, options.num_beams))
    if options.word_repeat_penalty:
        followers.append(repeats.follow(batch, options.num_beams, options.word_repeat_penalty))
    words = None
    if followers:
        words = BeamWords(bonus.pieces if bonus is not None else repeats.pieces, batch, options.num_beams)
    lengths = ((np.full(batch, options.min_length, dtype=np.int64), np.full(batch, options.max_length + 1, np.int64))
               if input_tokens is None else input_lengths(options, input_tokens))
    needed = 2 * options.num_beams if options.num_beams > 1 else 1  # tokens of one beam a step may choose from
    started, steps, full_reads = time.perf_counter(), 0, 0
    for length in range(1, options.max_length):
        log_probs, unit_weights = session.step(search.sequences[:, :, -1], beam_index)  # (B, K, V), (B, U, K)
        partial = session.partial_log_probs
        if partial and (bonus is not None or options.word_repeat_penalty or options.repetition_penalty != 1.0
                        or (options.end_penalty and np.isfinite(log_probs[:, :, eos]).any())):
            log_probs, partial = session.full_log_probs(), False
            full_reads += 1
        log_probs, unit_weights = log_probs.astype(np.float32), unit_weights.copy()  # backends reuse buffers
        for counted in followers:
            counted.apply(log_probs, words)
        _filter(log_probs, search.sequences, length, options, eos, guard, needed, not partial, lengths, ngrams)
        if partial and (np.isfinite(log_probs).sum(-1) < needed).any():
            log_probs = session.full_log_probs().astype(np.float32)  # the filters left a beam too few of its best
            _filter(log_probs, search.sequences, length, options, eos, guard, needed, True, lengths, ngrams)
            full_reads += 1
        beam_index = search.update(log_probs, unit_weights, length)
        if words is not None:
            words.advance(search.sequences[:, :, -1], beam_index)
            for counted in followers:
                counted.advance(words, beam_index)
        steps = length
        if on_step is not None:
            on_step(length, [search.partial(b) for b in range(batch)])
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("step %d: %d of %d inputs finished", length, int(np.sum(search.done)), batch)
        if search.finished:
            break
    seconds = time.perf_counter() - started
    logger.info("decoded %d inputs in %d steps of %d beam(s) in %.2f s (%.1f ms per step%s)", batch, steps,
                options.num_beams, seconds, 1000 * seconds / max(steps, 1),
                f"; {full_reads} steps read the full distribution" if full_reads else "")
    hypotheses = search.finalize()
    if guard is not None:
        hypotheses = [_whole_words(guard, b, h, eos) for b, h in enumerate(hypotheses)]
    if options.whole_sentences:
        hypotheses = [_first(h, sentences.kept(h.token_ids, eos)) for h in hypotheses]
    return hypotheses


def _whole_words(guard: WordGuard, item: int, hypothesis: Hypothesis, eos: int) -> Hypothesis:
    """`hypothesis` without the unknown word it ends in, cut by max_length in the middle (`WordGuard.unfinished`)."""
    drop = guard.unfinished(item, hypothesis.token_ids, eos)
    if not drop:
        return hypothesis
    tokens, weights = hypothesis.token_ids, hypothesis.unit_weights  # (T,), (T, U)
    end = len(tokens) - (tokens[-1:] == [eos])
    keep = list(range(end - drop)) + list(range(end, len(tokens)))
    return Hypothesis([tokens[i] for i in keep], hypothesis.score, weights[keep])


def _first(hypothesis: Hypothesis, count: int) -> Hypothesis:
    """`hypothesis`'s first `count` tokens, with their steps' unit weights (its score is the search's)."""
    if count == len(hypothesis.token_ids):
        return hypothesis
    return Hypothesis(hypothesis.token_ids[:count], hypothesis.score, hypothesis.unit_weights[:count])
