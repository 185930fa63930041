"""Every kind in torch on a CUDA GPU, the custom ops as Triton kernels against the same run with their torch maths:
token-exact in float32, and the same tokens as on the CPU. Skipped without a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")]

SCRIPT = """
import json, sys
import numpy as np
from locsum_sdk.backends.torch import generate_from_ids
from locsum_sdk.generation import GenerationOptions
from locsum_sdk.kernels.torch_ops import use_triton
from locsum_sdk.modeling.checkpoint import load_checkpoint

rng = np.random.default_rng(0)
kinds = ["pagesum", "hierencdec", "dyle", "hiersumm"]
models = {kind: load_checkpoint(sys.argv[1], kind=kind).model.float() for kind in kinds}
vocab = models["pagesum"].config.vocab_size
units = [[tuple(int(t) for t in rng.integers(4, vocab, 40)) for _ in range(5)],
         [tuple(int(t) for t in rng.integers(4, vocab, 25)) for _ in range(2)]]
options = GenerationOptions(num_beams=3, max_length=20, min_length=5)
def run(device):
    return {k: [h.token_ids for h in generate_from_ids(m, units, options, device=device)] for k, m in models.items()}
result = {"cpu": run("cpu"), "cuda": run("cuda")}
use_triton()
result["triton"] = run("cuda")
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def copying_checkpoint(tmp_path_factory, tokenizer, tokenizer_file):
    """A tiny PageSum with the copy distribution: every kind it converts to copies too."""
    from conftest import random_checkpoint, random_model, tiny_config

    from locsum_sdk.modeling.pagesum import PageSum

    model = random_model(lambda: PageSum(tiny_config(tokenizer.get_vocab_size(), copy=True)))
    return random_checkpoint(model, tmp_path_factory.mktemp("copy"), tokenizer_file,
                             {"policy": "spatial", "page_tokens": 48})


@pytest.mark.parametrize("copy", [False, True], ids=["plain", "copy"])
def test_every_kind_on_cuda_with_triton_ops_matches_torch_ops(checkpoint_dir, copying_checkpoint, copy):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    checkpoint = copying_checkpoint if copy else checkpoint_dir
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(checkpoint)], capture_output=True, text=True,
                          env=env, cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["triton"] == result["cuda"]
    assert result["cuda"] == result["cpu"]
