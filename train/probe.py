"""Linear probe of the encoder a DYLE extractor starts from: how much the encoder's state at each snippet's separator
tells about the oracle snippets beyond tf-idf, before any fine-tuning.

The encoder is frozen as the config prepares it (`init_from`, `objective_options.extractor_from`; bfloat16 products
with the config's `bf16`, as in training). On the training examples a scoring layer w and the tf-idf feature's
weight a (score = w . h + a * z, z the standardized tf-idf cosine to the query) are fitted to the oracle
cross-entropy, with an L2 penalty on w chosen by two-fold cross-validation on those examples; then recall of oracle
snippets at K on `--data`, beside tf-idf, and the probe minus tf-idf with the examples resampled in pairs. The
largest penalty winning says the states add nothing to tf-idf that generalizes.

    python -m train.probe --config train/configs/dyle-extractor-minilm.toml --train-examples 60 \\
        --train-data ../shared/data/qmsum/train.jsonl --data ../shared/data/qmsum/test.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from locsum_sdk.errors import OptionError
from locsum_sdk.limits import tfidf_scores
from locsum_sdk.modeling.dyle import oracle_cross_entropy

from .__main__ import prepare_tokenizer, starting_model, training_pager
from .config import TrainConfig
from .kinds.dyle import DyleSet
from .recall import print_report, recall_at, report_rows

PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)


@dataclass
class ProbeExample:
    states: torch.Tensor  # (n, D) the encoder's state at each snippet's separator
    tfidf: torch.Tensor  # (n,) the standardized tf-idf feature the extractor reads
    tfidf_scores: np.ndarray  # (n,) the tf-idf ranking recall is compared with
    oracle: list[int]


def probe_examples(model, data: DyleSet, indices: Sequence[int], desc: str, progress: bool,
                   bf16: bool = False) -> list[ProbeExample]:
    """The frozen extractor's snippet states of the examples at `indices` that have oracle snippets (with `bf16`,
    its matrix products in bfloat16, as training runs them)."""
    examples = []
    for i in tqdm(indices, desc=desc, disable=not progress):
        sample = data.get(i)
        if not sample.oracle:
            continue
        chunks = data.chunks(sample.snippets, sample.query)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            states = model.extractor.snippet_states(chunks["input_ids"], chunks["attention_mask"], chunks["separators"])
        examples.append(ProbeExample(states.float(), chunks["tfidf"].float(),
                                     tfidf_scores(sample.snippets, data.pager.query_ids(sample.query)),
                                     list(sample.oracle)))
    return examples


def oracle_loss(examples: Sequence[ProbeExample], weight: torch.Tensor, tfidf_weight: torch.Tensor) -> torch.Tensor:
    """The extractor's oracle cross-entropy under the probe's scores, averaged over the examples."""
    return torch.stack([oracle_cross_entropy(x.states @ weight + tfidf_weight * x.tfidf, x.oracle)
                        for x in examples]).mean()


def fit(examples: Sequence[ProbeExample], penalty: float, steps: int = 300) -> tuple[torch.Tensor, torch.Tensor]:
    """w and a minimizing the oracle loss plus penalty * |w|^2 (Adam from w = 0, a = 0.4: tf-idf's ranking)."""
    weight = torch.zeros(examples[0].states.shape[1], requires_grad=True)
    tfidf_weight = torch.tensor(0.4, requires_grad=True)
    optimizer = torch.optim.Adam([weight, tfidf_weight], lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        (oracle_loss(examples, weight, tfidf_weight) + penalty * weight.square().sum()).backward()
        optimizer.step()
    return weight.detach(), tfidf_weight.detach()


def choose_penalty(examples: Sequence[ProbeExample], penalties: Sequence[float] = PENALTIES) -> dict[float, float]:
    """Held-out oracle loss of each penalty, two folds (alternate examples)."""
    folds = [examples[0::2], examples[1::2]]
    if not all(folds):
        raise OptionError(f"the probe needs at least 2 training examples with oracle snippets, got {len(examples)}")
    return {p: float(np.mean([oracle_loss(folds[1 - f], *fit(folds[f], p)).item() for f in (0, 1)]))
            for p in penalties}


def probe_report(train: Sequence[ProbeExample], test: Sequence[ProbeExample], ks: Sequence[int]) -> dict:
    """The penalties' held-out losses, the chosen fit and the recall report (`train.recall.report_rows`)."""
    held_out = choose_penalty(train)
    penalty = min(held_out, key=held_out.get)
    weight, tfidf_weight = fit(train, penalty)
    rows: dict[str, dict[int, list[float]]] = {name: {k: [] for k in ks} for name in ("probe", "tf-idf")}
    for x in test:
        scores = (x.states @ weight + tfidf_weight * x.tfidf).numpy()
        for k in ks:
            rows["probe"][k].append(recall_at(scores, x.oracle, k))
            rows["tf-idf"][k].append(recall_at(x.tfidf_scores, x.oracle, k))
    zero = torch.zeros_like(weight)
    return {"held_out_loss": held_out, "penalty": penalty, "tfidf_weight": tfidf_weight.item(),
            "weight_norm": weight.norm().item(), "test_loss": oracle_loss(test, weight, tfidf_weight).item(),
            "test_loss_tfidf_alone": oracle_loss(test, zero, torch.tensor(0.4)).item(),
            "recall": report_rows(rows, "probe")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="a DYLE training config (its starting extractor)")
    parser.add_argument("--train-data", required=True, help="a JSON Lines file of training examples")
    parser.add_argument("--train-examples", type=int, default=60, help="examples spread evenly over --train-data")
    parser.add_argument("--data", required=True, help="a JSON Lines file to measure recall on")
    parser.add_argument("--limit", type=int, help="first N examples of --data")
    parser.add_argument("--k", default="5,10,25", help="comma-separated K values")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", help="write the report as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.train_examples < 2:
        parser.error("--train-examples: at least 2")
    torch.set_num_threads(args.threads)
    config = TrainConfig.load(args.config)
    if config.kind != "dyle":
        parser.error(f"--config: a DYLE config, not kind {config.kind!r}")
    _, tokenizer = prepare_tokenizer(config, [config.resolve(f) for f in config.train_files])
    model = starting_model(config, tokenizer).eval()
    pager = training_pager(config, tokenizer, model)
    progress = not args.quiet
    train_path, test_path = Path(args.train_data), Path(args.data)
    train_set = DyleSet([train_path], pager, tokenizer, config, "train", progress)
    test_set = DyleSet([test_path], pager, tokenizer, config, f"eval-{test_path.parent.name}-{test_path.stem}",
                       progress)
    picked = np.linspace(0, len(train_set) - 1, min(args.train_examples, len(train_set))).round().astype(int)
    train = probe_examples(model, train_set, sorted(set(picked.tolist())), "probe train", progress, config.bf16)
    test = probe_examples(model, test_set, range(min(args.limit or len(test_set), len(test_set))), "probe test",
                          progress, config.bf16)
    report = probe_report(train, test, [int(k) for k in args.k.split(",")])
    for penalty, loss in report["held_out_loss"].items():
        print(f"penalty {penalty:g}: held-out oracle loss {loss:.3f}")
    print(f"chosen penalty {report['penalty']:g}: |w| {report['weight_norm']:.3f}, tf-idf weight "
          f"{report['tfidf_weight']:.3f}; oracle loss on --data {report['test_loss']:.3f} "
          f"(tf-idf alone at 0.4: {report['test_loss_tfidf_alone']:.3f})")
    print_report(report["recall"], lambda k: f"R@{k}")
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
