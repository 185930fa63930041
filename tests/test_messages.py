"""Error and warning texts name only options that exist: every snake_case name in a message the runtime, the
exporter or training can raise or log is an option, a parameter or a field a user can set, or one of the other
names below (functions, files, config keys) that a message points to. A renamed or retired option (as `max_pages`
once was) fails here until its messages are corrected."""

import ast
import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from locsum_sdk import Summarizer, kinds
from locsum_sdk.configs.llama import LlamaConfig
from locsum_sdk.configs.model import BartConfig
from locsum_sdk.errors import InputTooLongError, OptionError
from locsum_sdk.generation import GenerationOptions
from locsum_sdk.limits import LimitOptions
from locsum_sdk.units import PagingOptions

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*sorted((ROOT / "locsum_sdk").rglob("*.py")), *sorted((ROOT / "train").rglob("*.py")),
           *sorted((ROOT / "export").rglob("*.py"))]
NAME = re.compile(r"(?<![\w./-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w(])")
LOGGING = {"debug", "info", "warning", "error", "exception", "critical"}
# names messages point to that are not options: API functions, files, checkpoint and config keys
OTHER_NAMES = {"estimate_memory", "summarize_batch", "unit_scores", "page_conf", "pytorch_model", "model_type",
               "inter_heads", "d_model", "locsum_sdk",
               # the keys of a user's LLM files (config.json, the safetensors index, tokenizer_config.json), its LM
               # head's tensor, and transformers' method that writes such a directory
               "chat_template", "rope_scaling", "hidden_act", "weight_map", "lm_head", "save_pretrained",
               "zero_points"}  # a block weight's form, as `MatMulNBits` names that input


def option_names() -> set[str]:
    groups = [LimitOptions, GenerationOptions, PagingOptions, BartConfig, LlamaConfig,
              *(kind.unit_options for kind in kinds.REGISTRY.values())]
    names = {f.name for group in groups for f in dataclasses.fields(group)}
    for function in (Summarizer.from_pretrained, Summarizer.__init__, Summarizer.unit_scores):
        names |= set(inspect.signature(function).parameters)
    from locsum_sdk.backends.onnxruntime import OnnxRuntimeBackend

    names |= set(inspect.signature(OnnxRuntimeBackend.__init__).parameters)
    from locsum_sdk.batch import run_job
    from locsum_sdk.bundle import TENSORRT_KEYS
    from locsum_sdk.exporters.tensorrt import EngineShapes

    names |= set(TENSORRT_KEYS) | {f.name for f in dataclasses.fields(EngineShapes)}  # engine maxima, manifest keys
    names |= set(inspect.signature(run_job).parameters)  # `locsum batch`
    from locsum_sdk import LiveDocument, UnitCache
    from locsum_sdk.ray_engine import RayEngine

    for function in (LiveDocument.__init__, UnitCache.__init__, RayEngine.__init__, Summarizer.summarize):
        names |= set(inspect.signature(function).parameters)
    from locsum_sdk.bundle import Manifest
    from locsum_sdk.serve.app import CODES
    from locsum_sdk.serve.options import ServeOptions
    from train.config import TRAINING_UNITS, TrainConfig

    names |= {f.name for group in (Manifest, ServeOptions, TrainConfig) for f in dataclasses.fields(group)}
    names |= set(TRAINING_UNITS)  # a training config's `units` keys that only training reads
    return names | set(CODES)  # the API's error codes


def message_names() -> dict[str, set[str]]:
    """snake_case names in the literal text of every raise and logging call, with the files they are in."""
    found: dict[str, set[str]] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                parts = node.exc.args
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOGGING:
                parts = node.args
            else:
                continue
            for part in parts:
                for text in (n.value for n in ast.walk(part) if isinstance(n, ast.Constant) and isinstance(n.value,
                                                                                                           str)):
                    for name in NAME.findall(text):
                        found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_messages_name_only_options_that_exist():
    known = option_names() | OTHER_NAMES
    unknown = {name: sorted(files) for name, files in message_names().items() if name not in known}
    assert not unknown, f"messages name options that do not exist: {unknown}"


def test_the_scan_sees_the_messages():
    names = message_names()
    assert {"unit_batch_size", "max_tokens", "memory_limit"} <= set(names)
    assert "max_pages" not in names


@pytest.mark.parametrize("kind", ["pagesum", "dyle", "hiersumm", "hierencdec"])
def test_the_advice_for_an_input_over_max_tokens_names_the_kinds_own_unit_size(kind):
    bundle = ROOT / "engines" / kind
    summarizer = Summarizer.from_pretrained(bundle, threads=1, verify=False)
    field = type(summarizer.defaults.units).UNIT_TOKENS
    with pytest.raises(InputTooLongError, match=rf"no page fits max_tokens=1 .* lower {field}$"):
        summarizer.summarize("The committee met on Monday. " * 20, truncate=True, max_tokens=1)


@pytest.mark.parametrize("policy", ["document", "discourse"])
def test_num_pages_is_refused_where_the_policy_does_not_use_it(policy):
    with pytest.raises(OptionError, match=r"num_pages=4 .* policy='spatial'"):
        PagingOptions(policy=policy, num_pages=4)
    assert PagingOptions(policy="spatial", num_pages=4).num_pages == 4
