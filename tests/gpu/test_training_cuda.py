"""Every kind's training step on a CUDA GPU against the same steps on the CPU (float32, no dropout, TF32 off): the
objectives build their grids on the host and must hand the model tensors on its device. Skipped without a GPU."""

import pytest
from test_dyle_training import config as dyle_config
from test_dyle_training import meetings  # noqa: F401 (fixture)
from test_hiersumm_training import MODEL as HIERSUMM_MODEL
from test_hiersumm_training import clusters  # noqa: F401 (fixture)
from test_hiersumm_training import config as hiersumm_config
from test_training import jsonl, run_config  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")]

STEPS = 2


def configs(kind, tmp_path, data, tokenizer_file, device):
    name, quiet = f"{kind}-{device}", {"device": device, "tf32": False, "max_steps": STEPS, "eval_every": 0}
    tiny = run_config(tmp_path, data["jsonl"], tokenizer_file, "summarize", name).model
    if kind == "dyle":
        return dyle_config(tmp_path, data["meetings"], tokenizer_file, name, model={**tiny, "dropout": 0.0}, **quiet)
    if kind in ("hiersumm-ranker", "hiersumm-both"):
        stage = kind.split("-")[1]
        return hiersumm_config(tmp_path, data["clusters"], tokenizer_file, name, objective_options={"stage": stage},
                               model={**HIERSUMM_MODEL, "dropout": 0.0}, **quiet)
    units = {"policy": "document", "page_tokens": 64} if kind == "hierencdec" else None
    changes = {"kind": kind, **({"units": units} if units else {})}
    return run_config(tmp_path, data["jsonl"], tokenizer_file, "summarize", name, **changes, **quiet,
                      model={**tiny, "dropout": 0.0, "copy": True})


@pytest.mark.parametrize("kind", ["pagesum", "hierencdec", "dyle", "hiersumm-ranker", "hiersumm-both"])
def test_each_kind_trains_on_cuda_as_on_the_cpu(tmp_path, jsonl, meetings, clusters, tokenizer_file, kind):  # noqa: F811
    from train.__main__ import build

    data = {"jsonl": jsonl, "meetings": meetings, "clusters": clusters}
    logs = {}
    for device in ("cpu", "cuda"):
        logs[device] = build(configs(kind, tmp_path / device, data, tokenizer_file, device), progress=False).train()
    assert [r["step"] for r in logs["cuda"]] == list(range(1, STEPS + 1))
    for cpu, cuda in zip(logs["cpu"], logs["cuda"]):
        assert cuda["loss"] == pytest.approx(cpu["loss"], rel=2e-3)
