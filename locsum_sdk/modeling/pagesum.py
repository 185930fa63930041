"""PageSum: pages encoded alone, the decoder run per page, pages mixed in hidden space at every step.

    h[u]  = decoder state of page u          (B, U, K, D)
    c[u]  = page_conf(h[u])                   (B, U, K)
    w     = softmax over real pages of c      (B, U, K)   padding pages get exactly 0
    y     = LM head(sum_u w[u] h[u])          (B, K, V)

With the config's `copy`, p = sum_u w[u] (g[u] softmax(y) + (1 - g[u]) copy[u]) (`modeling.copy`).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from ..configs.llama import LlamaConfig
from ..configs.model import BartConfig
from ..errors import BundleNotFoundError
from ..ops import page_combine
from . import copy
from .backbone import backbone
from .bart import init_weights
from .copy import CopySource
from .per_unit import PerUnitModel

KIND = "pagesum"

logger = logging.getLogger("locsum_sdk")


class PageSum(PerUnitModel):
    kind = KIND

    def __init__(self, config: BartConfig | LlamaConfig):
        super().__init__()
        self.config = config
        self.model = backbone(config)
        self.page_conf = nn.Linear(config.d_model, 1)
        self.combine = page_combine.torch_op()

    def reset_parameters(self, std: float = 0.02) -> None:
        init_weights(self, std)

    def mix(self, hidden: torch.Tensor, page_mask: torch.Tensor,
            source: CopySource | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (B, U, K, D) -> log-probabilities (B, K, V) and page weights (B, U, K). With copy, each page's
        copy distribution joins the vocabulary's under the same page weights (`copy.unit_mixture`)."""
        scores = self.page_conf(hidden).squeeze(-1)  # (B, U, K)
        mixed, weights = self.combine(hidden, scores, page_mask)  # (B, K, D), (B, U, K)
        logits = self.model.lm_logits(mixed)  # (B, K, V)
        if source is None:
            return torch.log_softmax(logits, dim=-1), weights
        return copy.unit_mixture(logits, weights, self.model.copy_gate(hidden, source), source), weights


def complete(config: BartConfig, state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """A BART without PageSum's page confidence layer (`lin.*` in the research code) gets it at zero: pages weigh
    equally until it is trained."""
    if "page_conf.weight" in state:
        return state
    logger.warning("%s has no page confidence layer (lin.*): page_conf starts at zero, pages weigh equally", source)
    return {**state, "page_conf.weight": torch.zeros(1, config.d_model), "page_conf.bias": torch.zeros(1)}


def load_research(file, config_path, kind: str | None):
    """PageSum's research state dict (HF BART names and `lin.*`) as `kind` (default pagesum); its HF BART
    config.json is `config_path` or sits beside the file."""
    from . import registry
    from .weights import CONFIG_FILE, Checkpoint, from_hf_names, read_config, tokenizer_beside

    kind = kind or KIND
    registry.check_formats(kind, "pagesum-research")
    config_path = config_path or file.path.parent / CONFIG_FILE
    if not config_path.is_file():
        raise BundleNotFoundError(f"{file.path} needs an HF BART config.json: pass one, or put it beside the file")
    config = BartConfig.from_hf(read_config(config_path))
    model = registry.build(kind, config, from_hf_names(file.state), str(file.path))
    return Checkpoint(model, tokenizer_beside(file.path.parent))


def register_model_kind() -> None:
    from . import graphs
    from .registry import Loader, ModelKind, register, register_loader

    register_loader(Loader("pagesum-research", claims=lambda file: file.state is not None, load=load_research,
                           fallback=True))
    register(ModelKind(
        name=KIND, model=PageSum, complete=complete,
        graphs=lambda model: {"encoder": graphs.encoder_spec(model), "decoder": graphs.decoder_spec(model)},
        functions={"decoder": page_combine.NAME}, register_symbolics=graphs.register_symbolics,
        formats=("hf-bart", "pagesum-research", "llm"),
    ))
