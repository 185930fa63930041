"""The decoding loop's own work per step against the summary's length, with every option that reads the beams'
words on (keywords, word repeats, trigram blocking, known words) and with them all off.

The loop runs without a model: a scripted session gives each of 4 beams a distribution over the default's
vocabulary (49,152 pieces) that favours the next pieces of a real text, so the beams write words, repeat them and
reorder. The default's tokenizer, its pieces and word lists are the real ones. Printed: ms a step at each summary
length with the options on and off, in turns, and how much longer a step is at the longest summary than at the
shortest. Target: a step's work does not grow with the summary (the longest within 1.25x of the shortest).
"""

from __future__ import annotations

import lzma
import time
from pathlib import Path

import numpy as np

from benchmarks.common import line_plot, write_result
from locsum_sdk.generation import GenerationOptions, generate
from locsum_sdk.keywords import Keyword, KeywordBonus
from locsum_sdk.repeats import WordRepeats
from locsum_sdk.words import Pieces, WordGuard, WordList, words_of

ROOT = Path(__file__).resolve().parents[1]
BEAMS = 4
TARGET = 1.25


class Scripted:
    """Each beam's three best pieces are the next pieces of `text`, from a place that depends on the beam; the
    others fall off as a model's do (a fixed random draw, so that ties are as rare as in a model's)."""

    partial_log_probs = False

    def __init__(self, ids: list[int], vocab: int):
        self.ids, self.steps = ids, 0
        self.rest = np.random.default_rng(0).normal(-14.0, 2.0, vocab).astype(np.float32)

    def step(self, tokens, beam_index):
        log_probs = np.repeat(self.rest[None, None], BEAMS, axis=1)
        for k in range(BEAMS):
            for rank in range(3):
                log_probs[0, k, self.ids[(self.steps + 7 * rank + k) % len(self.ids)]] = -0.5 - rank - 0.1 * k
        self.steps += 1
        return log_probs, np.ones((1, 1, BEAMS), np.float32)


def test_a_step_of_the_decoding_options_does_not_grow_with_the_summary(benchmark, quick):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(lzma.decompress((ROOT / "engines/default/tokenizer.json.xz").read_bytes()).decode())
    pieces = Pieces.from_tokenizer(tokenizer)
    text = (ROOT / "examples" / "meeting.txt").read_text()
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    found = [Keyword(word, 1, (word,)) for word in ("roof", "budget", "contractor", "schedule", "insurance")]
    shipped = lzma.decompress((ROOT / "engines/default/words.txt.xz").read_bytes()).decode().split()
    known = [[WordList(words_of([text])), WordList(shipped)]]
    lengths = (128, 512) if quick else (128, 512, 1024)
    on = dict(no_repeat_ngram_size=3, keywords=len(found), keyword_bonus=1.0, word_repeat_penalty=0.5,
              known_words=True)
    off = dict(no_repeat_ngram_size=0, keywords=0, word_repeat_penalty=0.0, known_words=False)

    def run(length: int, options: dict) -> tuple[float, list[int]]:
        chosen = GenerationOptions(num_beams=BEAMS, max_length=length, min_length=length - 1, **options)
        extras = {}
        if options["keywords"]:
            extras = dict(bonus=KeywordBonus.build(tokenizer, pieces, [found], 1.0), repeats=WordRepeats(pieces),
                          guard=WordGuard(pieces, known))
        start = time.perf_counter()
        best = generate(Scripted(ids, len(pieces.letters)), 1, chosen, 0, 2, 1, **extras)[0]
        return 1000 * (time.perf_counter() - start) / (length - 1), best.token_ids

    ms: dict[str, dict[int, list[float]]] = {"on": {n: [] for n in lengths}, "off": {n: [] for n in lengths}}

    def measure():
        for length in lengths:
            for name, options in (("on", on), ("off", off)):
                step_ms, tokens = run(length, options)
                ms[name][length].append(step_ms)
                assert len(tokens) >= length - 1

    benchmark.pedantic(measure, rounds=1 if quick else 2, iterations=1)
    median = {name: {n: float(np.median(v)) for n, v in series.items()} for name, series in ms.items()}
    growth = median["on"][lengths[-1]] / median["on"][lengths[0]]
    for n in lengths:
        print(f"\n{n} steps of {BEAMS} beams: {median['on'][n]:.2f} ms a step with every word option on, "
              f"{median['off'][n]:.2f} ms with them off ({median['on'][n] / median['off'][n]:.2f}x)")
    print(f"a step at {lengths[-1]} steps is {growth:.2f}x a step at {lengths[0]} with the options on "
          f"(target <= {TARGET}x)")
    info = {"beams": BEAMS, "vocabulary": len(pieces.letters), "lengths": list(lengths), "ms_a_step": median,
            "growth": growth, "target": TARGET}
    benchmark.extra_info.update(info)
    path = write_result("decoding_options", info)
    line_plot({f"options {name}": sorted(series.items()) for name, series in median.items()},
              path.parent / "decoding_options.png", "summary length (steps)", "ms a step (loop alone)",
              "The decoding loop's work per step", log_x=True)
    assert growth <= TARGET, f"a step's work grew {growth:.2f}x from {lengths[0]} to {lengths[-1]} steps"
