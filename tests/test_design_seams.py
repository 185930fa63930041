"""docs/design.md's list of what a change touches, kept true: a kind is its two files and a row of the kinds table;
a backbone is named only in modeling/, configs/ and by the kinds that run on it, and the step's shapes come from
`step_shape`; a decoding option is named only in generation.py (and the user guide), never in the backends, the
kinds or the modeling."""

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from locsum_sdk import kinds
from locsum_sdk.configs.llama import LlamaConfig
from locsum_sdk.configs.model import BartConfig, step_shape
from locsum_sdk.generation import GenerationOptions

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "locsum_sdk"
BACKBONES = {"bart": BartConfig, "llama": LlamaConfig}
SHAPE_OPTIONS = {"num_beams", "max_length"}  # a session's beams and cache capacity: shapes, not decoding rules


def strings_and_names(path: Path) -> set[str]:
    """Every string constant, identifier and attribute name in a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def modules(*parts: str) -> list[Path]:
    out = []
    for part in parts:
        target = PACKAGE / part
        out += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    return out


@pytest.mark.parametrize("kind", sorted(kinds.REGISTRY))
def test_a_kind_is_its_two_files_and_a_row_of_the_kinds_table(kind):
    assert (PACKAGE / "kinds" / f"{kind}.py").is_file() and (PACKAGE / "modeling" / f"{kind}.py").is_file()
    assert re.search(rf"^\| `{kind}` \|", (ROOT / "docs" / "design.md").read_text(), re.M)
    for path in modules("generation.py", "backends"):
        assert kind not in strings_and_names(path), f"{path.relative_to(ROOT)} names the kind {kind!r}"


def test_a_backbone_is_named_only_in_modeling_configs_and_the_kinds_that_run_on_it():
    named = {backbone for kind in kinds.REGISTRY.values() for backbone in kind.backbones}
    assert named == set(BACKBONES)
    runs_on = {kind.name for kind in kinds.REGISTRY.values() if "llama" in kind.backbones}
    allowed = {PACKAGE / "base_model.py", PACKAGE / "kinds" / "__init__.py",
               *(PACKAGE / "kinds" / f"{kind}.py" for kind in runs_on)}
    for path in PACKAGE.rglob("*.py"):  # the LLM readers (`llm/`) name the files' architectures, Llama's among them
        if any(PACKAGE / folder in path.parents for folder in ("modeling", "configs", "llm")) or path in allowed:
            continue
        assert not {n for n in strings_and_names(path) if n.lower() in ("llama", "llamaconfig")}, \
            f"{path.relative_to(ROOT)} names the llama backbone"


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
def test_every_backbone_builds_and_describes_its_step(backbone):
    from locsum_sdk.modeling.backbone import backbone as build

    config = BACKBONES[backbone](vocab_size=64, d_model=32, **({"layers": 2, "heads": 4, "kv_heads": 2, "ffn_dim": 48,
                                                                  "decoder_start_token_id": 2}
                                                                 if backbone == "llama" else
                                                                 {"encoder_layers": 2, "decoder_layers": 2,
                                                                  "encoder_heads": 4, "decoder_heads": 4,
                                                                  "encoder_ffn_dim": 48, "decoder_ffn_dim": 48}))
    network = build(config)
    for method in ("encode_units", "decode", "step", "lm_logits", "token_embedding"):
        assert callable(getattr(network, method)), method
    shape = step_shape(config.to_dict())
    assert (shape.layers, shape.cache_heads, shape.head_dim) == (2, config.cache_heads, 8)
    assert shape.shares_first_layer == network.shares_first_layer


def test_a_decoding_option_is_named_only_in_the_decoding_loop_and_the_user_guide():
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    for field in dataclasses.fields(GenerationOptions):
        assert f"`{field.name}`" in guide, f"the user guide's decoding table lacks {field.name}"
        if field.name in SHAPE_OPTIONS:
            continue
        for path in modules("backends", "kinds", "modeling"):
            assert field.name not in strings_and_names(path), f"{path.relative_to(ROOT)} names {field.name}"

