"""The extractive oracle: its incremental ROUGE equals rouge-score's on what it chose, and a hand-computed case."""

import random
from collections import Counter

import pytest
from conftest import sentence

pytest.importorskip("rouge_score")

from rouge_score import rouge_scorer  # noqa: E402

from train.oracle import WINDOW, oracle, oracles, rouge_tokens  # noqa: E402


def test_a_hand_computed_case():
    result = oracle(["the cat sat", "on the mat", "a dog barked"], ["The cat sat on the mat."])
    # first: "the cat sat" and "on the mat" tie at R1 F 2/3, R2 F 4/7 (2 of 5 bigrams, precision 1), RL F 2/3;
    # the earlier wins. Then both: R1 1, R2 8/9 (4 in-snippet bigrams of 5), RL 1 (union LCS covers all six words)
    assert result.indices == [0, 1]
    assert result.scores == pytest.approx([(2 / 3 + 4 / 7 + 2 / 3) / 3, (1 + 8 / 9 + 1) / 3])
    assert result.rouge == pytest.approx({"rouge1": 1.0, "rouge2": 8 / 9, "rougeLsum": 1.0})


def test_nothing_in_common_chooses_nothing():
    assert oracle(["a dog barked"], ["The cat sat."]).indices == []
    assert oracle(["a dog barked"], ["..."]).score == 0.0


def test_limit_caps_the_choice():
    snippets = [f"word{i} common" for i in range(6)]
    reference = [" ".join(f"word{i}" for i in range(6)) + " common"]
    assert len(oracle(snippets, reference, limit=2).indices) == 2


SCORER = rouge_scorer.RougeScorer(["rouge1", "rougeLsum"], use_stemmer=True)


def slow_rouge(chosen: list[str], reference: list[str]) -> dict[str, float]:
    """rouge-score's ROUGE-1 and ROUGE-Lsum of the chosen snippets (one candidate sentence each), and ROUGE-2 with
    bigrams counted inside each snippet, by plain counting."""
    got = SCORER.score("\n".join(reference), "\n".join(chosen))
    ref_words = [w for s in reference for w in rouge_tokens(s)]
    ref_bigrams = Counter(zip(ref_words, ref_words[1:]))
    have = Counter(b for text in chosen for b in zip(rouge_tokens(text), rouge_tokens(text)[1:]))
    overlap = sum(min(c, ref_bigrams[b]) for b, c in have.items())
    precision, recall = overlap / max(sum(have.values()), 1), overlap / max(sum(ref_bigrams.values()), 1)
    f2 = 2 * precision * recall / (precision + recall) if overlap else 0.0
    return {"rouge1": got["rouge1"].fmeasure, "rouge2": f2, "rougeLsum": got["rougeLsum"].fmeasure}


def slow_oracle(snippets: list[str], reference: list[str]) -> list[int]:
    """The greedy search, rescoring every candidate from scratch with `slow_rouge`."""
    chosen, best = [], 0.0
    while True:
        means = [(sum(slow_rouge([snippets[j] for j in chosen] + [snippets[i]], reference).values()) / 3, -i)
                 for i in range(len(snippets)) if i not in chosen]
        if not means or max(means)[0] <= best + 1e-12:
            return chosen
        best, i = max(means)
        chosen.append(-i)


@pytest.mark.parametrize("seed", range(6))
def test_it_chooses_as_a_search_scoring_with_rouge_score_would(seed):
    rng = random.Random(seed)
    snippets = [sentence(rng) for _ in range(rng.randint(5, 30))]
    reference = [rng.choice(snippets) for _ in range(2)] + [sentence(rng) for _ in range(rng.randint(1, 3))]
    result = oracle(snippets, reference)
    assert result.indices and sorted(result.scores) == result.scores
    assert result.indices == slow_oracle(snippets, reference)
    expected = slow_rouge([snippets[i] for i in result.indices], reference)
    assert result.rouge == pytest.approx(expected, abs=1e-9)
    assert result.score == pytest.approx(sum(expected.values()) / 3, abs=1e-9)


def test_many_cases_over_processes_as_one_by_one():
    rng = random.Random(7)
    cases = []
    for _ in range(2 * 2 * WINDOW + 3):  # two full windows of two processes and a short one
        snippets = [sentence(rng) for _ in range(rng.randint(3, 12))]
        cases.append((snippets, [rng.choice(snippets), sentence(rng)]))
    expected = [oracle(snippets, reference, 3).indices for snippets, reference in cases]
    assert oracles(iter(cases), len(cases), limit=3, workers=2, progress=False) == expected
    assert oracles(cases, len(cases), limit=3, workers=1, progress=False) == expected
