"""Backends: one module each, one small interface (`start(batch)` encodes, `session.step(...)` decodes)."""

from .base import Backend, Session, UnitBatch

BACKENDS = ("auto", "onnxruntime", "torch")

__all__ = ["BACKENDS", "Backend", "Session", "UnitBatch"]
