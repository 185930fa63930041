"""The isolated environment of the anchors: optimum (ORTModelForSeq2SeqLM) and CTranslate2, with the
transformers release optimum's exporter supports. Created once under ~/.cache/locsum; never our dependency."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENV = Path.home() / ".cache" / "locsum" / "bench-anchors-env"
REQUIREMENTS = ["torch==2.13.0", "optimum==2.1.0", "optimum-onnx[onnxruntime]==0.1.0", "ctranslate2==4.8.5",
                "transformers>=4.56,<4.58"]  # CTranslate2 4.8 passes dtype=; optimum-onnx needs <4.58


def python() -> Path:
    """The environment's interpreter, creating the environment first if needed."""
    executable = ENV / "bin" / "python"
    marker = ENV / "requirements.txt"
    if not executable.is_file() or not marker.is_file() or marker.read_text().split() != REQUIREMENTS:
        subprocess.run([sys.executable, "-m", "venv", str(ENV)], check=True)
        subprocess.run([str(executable), "-m", "pip", "install", "-q", *REQUIREMENTS], check=True)
        marker.write_text("\n".join(REQUIREMENTS))
    return executable
