"""PyTorch definitions of the model kinds: the one source of truth for their maths (needs torch)."""

from .config import BartConfig

__all__ = ["BartConfig"]
