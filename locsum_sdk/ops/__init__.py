"""Custom ops of the `locsum` ONNX domain, one module per op (numpy reference, torch op, ONNX function)."""

from . import doc_scaled_attention, page_combine, snippet_marginalize

__all__ = ["doc_scaled_attention", "page_combine", "snippet_marginalize"]
