"""Oracle extraction throughput: the greedy mean-ROUGE oracle (`train.oracle`) for every QMSum train example, its
snippets the speaker turns DYLE's pager makes (shipped tokenizer, default snippet options). Target: all of QMSum
train in under 10 minutes on this machine. `--quick`: the first 100 examples, the total projected."""

from __future__ import annotations

import time

import pytest

from benchmarks.common import write_result
from locsum_sdk import kinds
from locsum_sdk.bundle import Bundle
from locsum_sdk.tokenizer_file import read_tokenizer
from locsum_sdk.units import SpecialTokens
from train.config import DATA
from train.data import JsonlIndex
from train.kinds.dyle import reference_sentences
from train.oracle import oracle

TRAIN = DATA / "qmsum" / "train.jsonl"


@pytest.mark.skipif(not TRAIN.is_file(), reason=f"{TRAIN} (the shared data) is not here")
def test_oracle_throughput_on_qmsum_train(benchmark, quick):
    from locsum_sdk.summarizer import default_bundle

    kind = kinds.get("dyle")
    options = kind.unit_options()
    pager = kind.pager(read_tokenizer(Bundle.load(default_bundle()).file("tokenizer.json")), SpecialTokens(), options)
    index = JsonlIndex([TRAIN])
    count = 100 if quick else len(index)
    stats = {"snippets": 0, "chosen": 0, "paging_s": 0.0, "oracle_s": 0.0}

    def run():
        for i in range(count):
            example = index[i]
            started = time.perf_counter()
            snippets = pager(example.documents, example.query)
            paged = time.perf_counter()
            result = oracle([u.text for u in snippets], reference_sentences(example.summary), options.top_k)
            stats["paging_s"] += paged - started
            stats["oracle_s"] += time.perf_counter() - paged
            stats["snippets"] += len(snippets)
            stats["chosen"] += len(result.indices)

    benchmark.pedantic(run, rounds=1, iterations=1)
    total = (stats["paging_s"] + stats["oracle_s"]) * len(index) / count
    print(f"\noracle on {count} of {len(index)} QMSum train examples ({stats['snippets'] / count:.0f} snippets and "
          f"{stats['chosen'] / count:.1f} chosen each): oracle {stats['oracle_s']:.1f} s, paging "
          f"{stats['paging_s']:.1f} s; all of QMSum train: {total / 60:.1f} min"
          f"{' (projected)' if count < len(index) else ''} (target: under 10 min)")
    write_result("oracle_throughput", {**stats, "examples": count, "of": len(index), "total_minutes": total / 60})
