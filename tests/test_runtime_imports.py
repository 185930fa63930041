"""The runtime (load a bundle, summarize, the ops' numpy references) never imports torch, transformers, the
export toolchain or the GPU toolchain (triton, tensorrt)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from locsum_sdk import kinds

SCRIPT = """
import json, sys
import locsum_sdk.ops  # the numpy references of every op
import locsum_sdk.kernels.torch_ops  # the kernels' torch launcher imports torch and triton inside its functions
from locsum_sdk import Summarizer
summary = Summarizer.from_pretrained(sys.argv[1], threads=1).summarize(
    ["The council met on Tuesday. The budget was approved.", "The library opens in spring."], max_length=6)
heavy = ("torch", "transformers", "onnx", "onnxscript", "safetensors", "triton", "tensorrt")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


BUNDLES = {"pagesum": "bundle_dir", "hierencdec": "hierencdec_bundle_dir", "dyle": "dyle_bundle_dir",
           "hiersumm": "hiersumm_bundle_dir"}


@pytest.mark.parametrize("kind", kinds.names())
def test_summarizing_with_a_bundle_imports_no_torch(request, kind):
    assert kind in BUNDLES, f"kind {kind!r} has no bundle fixture here: add one, every kind's runtime must be proven"
    bundle = request.getfixturevalue(BUNDLES[kind])
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(bundle)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


SERVE = """
import json, sys
from locsum_sdk.serve import ServeOptions, create_app
create_app(sys.argv[1], ServeOptions(memory_budget="1GB"), threads=1)
heavy = ("torch", "transformers", "onnx", "onnxscript", "safetensors", "triton", "tensorrt", "ray")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def test_the_server_imports_no_torch(bundle_dir):
    done = subprocess.run([sys.executable, "-c", SERVE, str(bundle_dir)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
