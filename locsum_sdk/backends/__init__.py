"""Backends: one module each, one small interface (`start(batch)` encodes, `session.step(...)` decodes)."""

from .base import Backend, Session

BACKENDS = ("auto", "onnxruntime", "tensorrt", "torch")
DEVICES = ("auto", "cpu", "cuda")

__all__ = ["BACKENDS", "DEVICES", "Backend", "Session"]
