"""Each extra brings what its commands import: the TensorRT export's dry run needs only the base install and the
`gpu` extra (and their own requirements), and the `gpu` and `test` extras pin the TensorRT this release names."""

import importlib.metadata
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from locsum_sdk import extras
from locsum_sdk.backends.tensorrt import TENSORRT_VERSION

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

DRY_RUN = """
import sys
started = set(sys.modules)  # what the interpreter loaded before (site hooks such as setuptools' distutils shim)
import json, tempfile
from pathlib import Path
from locsum_sdk.exporters import tensorrt
tensorrt.build_engines(sys.argv[1], Path(tempfile.mkdtemp()) / "out", dry_run=True)
print(json.dumps(sorted({name.split(".")[0] for name in set(sys.modules) - started})))
"""


def closure(requirements: list[str]) -> set[str]:
    """The distributions `requirements` name, with what each installed one requires in turn, its requested extras'
    requirements included (markers evaluated)."""
    names, seen = set(), set()
    pending = [(Requirement(r), "") for r in requirements]  # (requirement, the extra of its parent it serves)
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = requirement.name.lower().replace("_", "-")
        names.add(name)
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) in seen:
                continue
            seen.add((name, wanted))
            try:
                pending.extend((Requirement(r), wanted) for r in importlib.metadata.requires(name) or [])
            except importlib.metadata.PackageNotFoundError:
                pass
    return names


def test_the_tensorrt_dry_run_needs_only_the_gpu_extra(tmp_path):
    done = subprocess.run([sys.executable, "-c", DRY_RUN, str(ROOT / "engines" / "dyle")], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = json.loads(done.stdout.splitlines()[-1])
    owners = importlib.metadata.packages_distributions()
    allowed = closure(PROJECT["dependencies"] + PROJECT["optional-dependencies"]["gpu"]) | {"locsum"}
    missing = {}
    for module in modules:
        found = {owner.lower().replace("_", "-") for owner in owners.get(module, [])}
        if module not in sys.stdlib_module_names and found and not found & allowed:  # a namespace package (google)
            missing[module] = sorted(found)  # is brought by any of the distributions sharing it
    assert missing == {}, "imported by the dry run but not brought by pip install 'locsum[gpu]'"


def test_the_gpu_and_test_extras_pin_one_tensorrt():
    extras = PROJECT["optional-dependencies"]
    pins = {Requirement(r).name: Requirement(r).specifier for r in extras["gpu"] + extras["test"]}
    assert str(pins["tensorrt-cu12"]) == str(pins["tensorrt-cu12-bindings"]) == f"=={TENSORRT_VERSION}"
    assert all(str(Requirement(r).specifier) for r in extras["gpu"]), "every gpu requirement is bounded"


def test_each_need_names_the_extra_that_brings_its_modules():
    owners = importlib.metadata.packages_distributions()
    needs = [value for value in vars(extras).values() if isinstance(value, extras.Need)]
    assert len(needs) >= 8
    for need in needs:
        allowed = closure(PROJECT["dependencies"] + PROJECT["optional-dependencies"][need.extra])
        for module in need.modules:
            found = {owner.lower().replace("_", "-") for owner in owners.get(module, [])}
            if found:  # installed here (cuda-python is not on a CPU machine)
                assert found & allowed, f"{need.purpose}: {module} is not brought by locsum[{need.extra}]"


COMMANDS = {  # a command line, the module made missing, the extra its one-line error must name
    "summarize": (["summarize", "absent.txt"], "onnxruntime", "cpu"),
    "summarize on torch": (["summarize", "absent.txt", "--backend", "torch"], "torch", "torch"),
    "live": (["live", "absent.txt"], "onnxruntime", "cpu"),
    "eval": (["eval", "--data", "absent.jsonl"], "rouge_score", "eval"),
    "eval with a bundle": (["eval", "--data", "absent.jsonl", "--bundle", "absent"], "onnxruntime", "cpu"),
    "batch": (["batch", "--input", "absent.jsonl", "--output", "out.jsonl"], "onnxruntime", "cpu"),
    "batch on ray": (["batch", "--input", "absent.jsonl", "--output", "out.jsonl", "--engine", "ray"], "ray", "ray"),
    "export": (["export", "--checkpoint", "absent", "--output", "out"], "onnxscript", "export"),
    "export --trt --dry-run": (["export", "--trt", "--bundle", "absent", "--dry-run"], "onnx", "gpu"),
    "export --trt": (["export", "--trt", "--bundle", "absent"], "onnx", "gpu"),
    "export --trt without TensorRT": (["export", "--trt", "--bundle", str(ROOT / "engines" / "pagesum")], "tensorrt",
                                      "gpu"),
    "bench": (["bench", "--bundle", "absent"], "onnxruntime", "cpu"),
    "profile": (["profile", "--bundle", "absent"], "onnxruntime", "cpu"),
    "serve": (["serve", "--bundle", "absent"], "fastapi", "serve"),
    "serve on ray": (["serve", "--bundle", "absent", "--engine", "ray"], "grpc", "serve-ray"),
}


@pytest.mark.parametrize("case", sorted(COMMANDS))
def test_a_missing_extra_is_one_line_and_exit_2_before_any_work(case, monkeypatch, tmp_path, capsys):
    from locsum_sdk.cli import main

    argv, module, extra = COMMANDS[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it fails too
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'locsum[{extra}]'" in lines[0] and module in lines[0], captured.err
    assert captured.out == "" and list(tmp_path.iterdir()) == []  # nothing read (absent files) or written


def test_every_command_is_checked():
    from locsum_sdk.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    checked = {argv[0] for argv, _, _ in COMMANDS.values()}
    assert set(commands) - checked == {"doctor", "cache"}  # the doctor reports what is missing, stage by stage;
    # the cache command lists and removes directories with the standard library alone
