"""Where each sentence came from, measured: the default bundle on QMSum val queries (60; --quick: 8), every sentence
of every summary with content words. For each, the share of its content words the cited passages hold, against a
passage drawn at random from the same units (the target: cited at least twice the random), and what each piece of
evidence adds: a random sentence of the sentence's top-weighted unit (the weights alone), the best sentence of any
unit by shared words (the words alone), and the rule (`locsum_sdk.sources`: words within the well-weighted units).
Also how often the words' best unit is the top-weighted one, and the share of sentences marked unsupported. And the
`drop_unsupported` option on the same summaries: the sentences it drops, ROUGE and the input-specific words the
reference also holds with and without them, and a few dropped sentences to read. Writes
`benchmarks/results/sources.json`."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import write_result
from locsum_sdk import Summarizer
from locsum_sdk.evaluation import input_specific_words, read_examples, rouge_scores, shared_counts
from locsum_sdk.sources import supported_only
from locsum_sdk.units import split_sentences
from locsum_sdk.words import content_words

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qmsum" / "val.jsonl"


def shared(words: set[str], text: str) -> float:
    return len(words & content_words(text)) / len(words)


@pytest.mark.skipif(not DATA.is_file(), reason=f"{DATA} (the shared data) is not here")
def test_cited_passages_against_random_ones_and_what_each_evidence_adds(benchmark, quick):
    examples = read_examples(DATA, 8 if quick else 60)
    summarizer = Summarizer.from_pretrained(threads=2)
    rng = random.Random(0)
    rows = {"cited (the rule)": [], "random, same units": [], "weights alone": [], "words alone": []}
    top_is_best, unsupported, sentences = [], 0, 0
    full, kept, dropped = [], [], []

    def run():
        nonlocal unsupported, sentences
        for example in examples:
            summary = summarizer.summarize(example.documents, query=example.query)
            full.append(summary.text)
            kept.append(supported_only(summary.text, summary.sentences)[0])
            dropped.extend(summary.text[s.start:s.end] for s in summary.sentences if not s.supported)
            unit_sentences = [[unit.text[a:b] for a, b in split_sentences(unit.text)] or [unit.text]
                              for unit in summary.units]
            for sentence in summary.sentences:
                words = content_words(summary.text[sentence.start:sentence.end])
                if not words:
                    continue
                sentences += 1
                unsupported += not sentence.supported
                documents = example.documents
                if sentence.passages:
                    first = sentence.passages[0]
                    rows["cited (the rule)"].append(shared(words, documents[first.document][first.start:first.end]))
                    rows["random, same units"].append(shared(words, rng.choice(unit_sentences[first.unit])))
                top = int(np.argmax(sentence.unit_weights))
                rows["weights alone"].append(shared(words, rng.choice(unit_sentences[top])))
                best = [max(shared(words, text) for text in texts) for texts in unit_sentences]
                rows["words alone"].append(max(best))
                top_is_best.append(best[top] == max(best))

    benchmark.pedantic(run, rounds=1, iterations=1)
    means = {name: float(np.mean(values)) for name, values in rows.items()}
    print(f"\n{len(examples)} queries, {sentences} sentences with content words; share of a sentence's content words "
          "its passage holds:")
    for name, value in means.items():
        print(f"{name:>22}: {value:.3f} ({len(rows[name])} passages)")
    ratio = means["cited (the rule)"] / means["random, same units"]
    print(f"cited / random from the same units: {ratio:.2f}x; the words' best unit is the top-weighted one for "
          f"{np.mean(top_is_best):.0%} of sentences; unsupported: {unsupported / sentences:.0%} of sentences")
    references = [example.reference for example in examples]
    specific = input_specific_words(examples)
    scores = {}
    for name, texts in (("whole summaries", full), ("drop_unsupported", kept)):
        rouge = rouge_scores(texts, references)
        scores[name] = {**{key: float(np.mean([r[key] for r in rouge])) for key in rouge[0]},
                        "specific words also in the reference": float(np.mean(shared_counts(texts, specific,
                                                                                           references))),
                        "words": float(np.mean([len(t.split()) for t in texts])),
                        "empty": sum(not t for t in texts)}
        print(f"{name:>17}: " + ", ".join(f"{key} {value:.2f}" for key, value in scores[name].items()))
    print("dropped sentences, to read:", *rng.sample(dropped, min(6, len(dropped))), sep="\n  ")
    write_result("sources", {"queries": len(examples), "sentences": sentences, "means": means, "ratio": ratio,
                             "top_weighted_is_best": float(np.mean(top_is_best)),
                             "unsupported": unsupported / sentences, "drop_unsupported": scores})
    assert ratio >= 2
