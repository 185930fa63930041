"""Exporters from PyTorch checkpoints to engine bundles (need the `export` extra: torch, onnx, onnxscript)."""
