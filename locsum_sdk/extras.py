"""Which optional extra brings which package, and a check that a piece of work finds them before it starts."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

from .errors import BackendUnavailableError


@dataclass(frozen=True)
class Need:
    """Modules a piece of work imports, and the extra of `pip install 'locsum[EXTRA]'` that brings them."""

    purpose: str  # what needs them, e.g. "the onnxruntime backend"
    extra: str
    modules: tuple[str, ...]
    alternative: str = ""  # another way to get them, e.g. "or 'locsum[gpu]' on NVIDIA"


ONNXRUNTIME = Need("the onnxruntime backend", "cpu", ("onnxruntime",), "or 'locsum[gpu]' on NVIDIA")
TORCH = Need("the torch backend (checkpoints)", "torch", ("torch", "safetensors"))
TENSORRT = Need("the tensorrt backend", "gpu", ("tensorrt", "cuda"))
ROUGE = Need("ROUGE", "eval", ("rouge_score",))
RAY = Need("--engine ray", "ray", ("ray",))
SERVE = Need("locsum serve", "serve", ("fastapi", "uvicorn", "prometheus_client"))
SERVE_RAY = Need("locsum serve --engine ray", "serve-ray", ("ray", "grpc", "aiohttp"))
ONNX_EXPORT = Need("exporting a checkpoint to ONNX", "export", ("torch", "safetensors", "onnx", "onnxscript"))
PDF = Need("reading PDF files", "files", ("pypdfium2",))
HTML = Need("reading HTML files", "files", ("trafilatura", "lxml_html_clean"))
DOCX = Need("reading Word (DOCX) files", "files", ("docx",))
MARKDOWN = Need("reading Markdown files", "files", ("markdown_it",))
TRT_PREPARE = Need("preparing graphs for TensorRT", "gpu", ("onnx",), "or 'locsum[export]' for a dry run")


def installed(module: str) -> bool:
    """Whether `module` can be imported (found on the path; a module set to None in sys.modules is blocked)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(*needs: Need) -> None:
    """Raise `BackendUnavailableError` naming the first need whose modules are not all installed, and its extra."""
    for need in needs:
        missing = [module for module in need.modules if not installed(module)]
        if missing:
            alternative = f" ({need.alternative})" if need.alternative else ""
            raise BackendUnavailableError(f"{need.purpose} needs {', '.join(missing)}: pip install "
                                          f"'locsum[{need.extra}]'{alternative}")
