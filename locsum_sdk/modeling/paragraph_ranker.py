"""The Hierarchical Transformer's learned paragraph ranker (Liu & Lapata 2019, section 3.1).

    t[j] = LSTM_title(title)[j]                  the title (or query) tokens
    u    = max over j of t[j]
    p[k] = LSTM_paragraph(paragraph)[k]          the paragraph tokens
    h[k] = tanh(W [p[k]; u] + b)
    s    = sigmoid(w . max over k of h[k] + c)   the paragraph's score, regressed on its ROUGE-2 recall

With `RankerConfig.tfidf` (not in the paper), the ranker also reads f, the paragraph's tf-idf cosine to the title
standardized over the input's paragraphs (`tfidf_feature`): h[k] = tanh(W [p[k]; u; f] + b) and
s = sigmoid(w . max over k of h[k] + v f + c), v starting at 1, so that training starts from a mix of the two
rankings and learns when the words the title shares with a paragraph matter.

Training (`ranker_loss`): the paper's regression (squared error of s against each paragraph's ROUGE-2 recall),
plus by default a listwise term, the cross-entropy between the recall shares of an input's paragraphs and the
softmax of their logits. Recall targets are small (most paragraphs share few bigrams with the summary), so the
regression alone is met by a near-constant score and its gradient fades as the sigmoid saturates: trained on it
alone, the ranker ranked QMSum val paragraphs no better than input order. The listwise term's gradient does not
fade and rewards the order, which is all the runtime uses. Both keep the score a monotone function of the same
logit, so the exported graph is unchanged.

Both LSTMs read left to right over right-padded rows, so padding never reaches a real position; the max-pools
skip padding. A paragraph scored without a title uses a title of zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class RankerConfig:
    vocab_size: int
    embed_dim: int = 256
    hidden: int = 256
    pad_token_id: int = 1
    tfidf: bool = False  # read each paragraph's standardized tf-idf cosine to the title


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over the positions `mask` keeps: x (N, T, D), mask (N, T) -> (N, D); zeros where it keeps none."""
    filled = x.masked_fill(~mask[..., None], torch.finfo(x.dtype).min)
    return torch.where(mask.any(-1, keepdim=True), filled.amax(dim=1), torch.zeros_like(filled[:, 0]))


class ParagraphRanker(nn.Module):
    def __init__(self, config: RankerConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=config.pad_token_id)
        self.title_lstm = nn.LSTM(config.embed_dim, config.hidden, batch_first=True)
        self.paragraph_lstm = nn.LSTM(config.embed_dim, config.hidden, batch_first=True)
        self.mix = nn.Linear(2 * config.hidden + config.tfidf, config.hidden)
        self.score = nn.Linear(config.hidden, 1)
        if config.tfidf:
            self.tfidf_weight = nn.Parameter(torch.ones(()))

    def forward(self, title_ids: torch.Tensor, title_mask: torch.Tensor, paragraph_ids: torch.Tensor,
                paragraph_mask: torch.Tensor, tfidf: torch.Tensor | None = None) -> torch.Tensor:
        """title_ids, title_mask (N, Tq); paragraph_ids, paragraph_mask (N, T); tfidf (N,) when the config reads
        it -> scores in (0, 1), (N,)."""
        return torch.sigmoid(self.logits(title_ids, title_mask, paragraph_ids, paragraph_mask, tfidf))

    def logits(self, title_ids: torch.Tensor, title_mask: torch.Tensor, paragraph_ids: torch.Tensor,
               paragraph_mask: torch.Tensor, tfidf: torch.Tensor | None = None) -> torch.Tensor:
        """The scores before the sigmoid, (N,)."""
        if (tfidf is not None) != self.config.tfidf:
            raise ValueError(f"this ranker {'reads' if self.config.tfidf else 'does not read'} a tf-idf feature")
        title, _ = self.title_lstm(self.embed(title_ids))  # (N, Tq, H)
        pooled_title = masked_max(title, title_mask.bool())  # (N, H)
        tokens, _ = self.paragraph_lstm(self.embed(paragraph_ids))  # (N, T, H)
        parts = [tokens, pooled_title[:, None].expand(-1, tokens.shape[1], -1)]
        if tfidf is not None:
            parts.append(tfidf[:, None, None].to(tokens.dtype).expand(-1, tokens.shape[1], 1))
        hidden = masked_max(torch.tanh(self.mix(torch.cat(parts, dim=-1))), paragraph_mask.bool())  # (N, H)
        logits = self.score(hidden).squeeze(-1)
        return logits if tfidf is None else logits + self.tfidf_weight * tfidf.to(logits.dtype)


def ranker_loss(logits: torch.Tensor, targets: torch.Tensor, listwise: float = 1.0) -> torch.Tensor:
    """The loss of one input's paragraphs: logits (N,) of the ranker, targets (N,) their ROUGE-2 recall (0 to 1).

    Mean squared error of sigmoid(logits) against the targets, plus `listwise` times the cross-entropy between the
    targets' shares (targets / their sum) and softmax(logits); that term is left out where every target is 0."""
    loss = torch.mean((torch.sigmoid(logits) - targets) ** 2)
    total = targets.sum()
    if listwise and total > 0:
        loss = loss - listwise * torch.sum(targets / total * torch.log_softmax(logits, dim=0))
    return loss
