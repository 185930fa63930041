"""One HierEncDec encoder point in a fresh process: encode D documents of L tokens (one item, bart-base shape,
random weights) with the efficient form or the dense-mask form; print peak RSS and a digest of the states as JSON."""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import BART_BASE  # noqa: E402
from locsum_sdk.profiling import peak_rss_mb, rss_mb  # noqa: E402


def point(form: str, docs: int, length: int, threads: int) -> dict:
    import time

    import torch

    from locsum_sdk.configs.model import BartConfig
    from locsum_sdk.modeling.hierencdec import HierEncDec

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = HierEncDec(BartConfig(**BART_BASE)).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, BART_BASE["vocab_size"], (docs, length), generator=g)
    ids[:, 0] = 0
    mask = torch.ones(docs, length, dtype=torch.long)
    mask[::3, length // 2 :] = 0  # uneven documents
    unit_mask = torch.ones(1, docs, dtype=torch.bool)
    loaded = rss_mb()
    started = time.perf_counter()
    with torch.inference_mode():
        encode = (lambda: model.encode(ids, mask, unit_mask)[0]) if form == "efficient" else (
            lambda: model.dense_encode(ids, mask, unit_mask))
        memory = encode()
    seconds = time.perf_counter() - started
    real = memory[mask.bool()]  # (real tokens, D)
    return {"form": form, "docs": docs, "length": length, "peak_rss_mb": peak_rss_mb(), "loaded_rss_mb": loaded,
            "seconds": seconds, "digest": real[:: max(1, len(real) // 64), :4].flatten().tolist()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--form", required=True, choices=("efficient", "dense"))
    parser.add_argument("--docs", type=int, required=True)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(point(args.form, args.docs, args.length, args.threads)))


if __name__ == "__main__":
    main()
