"""One export of an LLM in a fresh process: `export_onnx` of the model at MODEL into OUT, reporting as JSON the
process's resident set before the export (after its imports and reading the model's header, as the export's first
step does) and its peak during it (VmHWM), the seconds it took and the bound `exporters.streamed.ExportMemory` states
for the model's shapes."""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402, F401  imported before the baseline is read: the export's own memory is measured
import onnxruntime  # noqa: E402, F401
import torch  # noqa: E402, F401

from locsum_sdk.exporters.onnx import OPSET, export_onnx  # noqa: E402
from locsum_sdk.exporters.streamed import ExportMemory  # noqa: E402
from locsum_sdk.llm import read_llm  # noqa: E402
from locsum_sdk.modeling import registry  # noqa: E402
from locsum_sdk.modeling.llm_checkpoint import DEFAULT_KIND, load_llm  # noqa: E402
from locsum_sdk.profiling import peak_rss_mb, rss_mb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--no-validate", dest="validate", action="store_false")
    parser.add_argument("--carry-weights", action="store_true")
    args = parser.parse_args()
    bound = ExportMemory.of(read_llm(args.model).origins.values())
    load_llm(args.model, stand_ins=True)
    registry.model_kind(DEFAULT_KIND).register_symbolics(OPSET)
    baseline = rss_mb()
    started = time.perf_counter()
    export_onnx(args.model, args.out, force=True, validate=args.validate, carry_weights=args.carry_weights)
    seconds = time.perf_counter() - started
    print(json.dumps({"baseline_mb": baseline, "peak_mb": peak_rss_mb(), "seconds": seconds,
                      "largest_mb": bound.largest / 2**20, "weights_mb": bound.weights / 2**20,
                      "bound_mb": (bound.validating if args.validate else bound.writing) / 2**20}))


if __name__ == "__main__":
    main()
