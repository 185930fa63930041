"""Custom ops of the `locsum` ONNX domain, one module per op (numpy reference, torch op, ONNX function)."""

from . import page_combine

__all__ = ["page_combine"]
