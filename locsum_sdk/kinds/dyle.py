"""DYLE, runtime side: snippets (sentences, or the speaker turns of a dialogue) as units; the extractor graph scores
every snippet from chunks of consecutive snippets and keeps the top K (the selection stage); the K snippets are
encoded alone and decoded as PageSum decodes pages, the decoder ending in `locsum.SnippetMarginalize`.

Extractor chunks are `<s> [query </s>] snippet </s> snippet </s> ...` of at most `chunk_tokens` tokens, in the
generator's token ids (a BART encoder, or a RoBERTa sharing BART's BPE), or `[CLS] [query [SEP]] snippet [SEP] ...`
in the ids of an extractor's own tokenizer (a WordPiece BERT such as all-MiniLM-L6-v2, carried in the bundle as
`extractor_tokenizer.json`); a snippet's score is read at the separator after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import constants as C
from ..configs.dyle import DyleConfig, LlamaDyleConfig
from ..configs.llama import BACKBONE as LLAMA
from ..errors import LocsumError, OptionError
from ..memory import arrays_bytes, encoder_pass
from ..units import MIN_PAGE_TOKENS, Pager, Span, Unit, by_line, is_dialogue
from ..validation import check_choice, check_int
from . import BART, GraphIO, Kind, OwnTokenizer, Selection, TensorIO, keep_top, register, tfidf_features, tfidf_input
from .pagesum import PageSumLayout
from .pagesum import graphs as per_unit_graphs

REVISION = 1
POLICIES = ("auto", "sentence", "turn")
SEPARATORS = "separators"  # extractor input: flat index (chunk * length + position) of the </s> after each snippet
SCORES = "scores"


@dataclass(frozen=True)
class SnippetOptions:
    """How text becomes snippets and how many the generator reads."""

    UNIT_TOKENS = "snippet_tokens"
    ALSO_WITHIN_POSITIONS = ("chunk_tokens",)  # an export fits its default to the model's positions

    policy: str = "auto"  # "sentence", "turn" (each line a speaker turn), or "auto": turns where most lines are
    snippet_tokens: int = 128  # one snippet as the generator reads it, query and special tokens included
    top_k: int = 25  # snippets kept by the extractor
    chunk_tokens: int = 512  # one extractor chunk (at most the extractor's positions)

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, POLICIES)
        check_int("snippet_tokens", self.snippet_tokens, MIN_PAGE_TOKENS)
        check_int("top_k", self.top_k, 1)
        check_int("chunk_tokens", self.chunk_tokens, self.snippet_tokens)  # a chunk holds any one snippet

    def check_model(self, model: dict[str, Any], error: type[LocsumError] = OptionError) -> None:
        """chunk_tokens fits the extractor."""
        extractor = model.get("extractor") or {}
        positions = extractor.get("max_positions", model["max_positions"])
        if self.chunk_tokens > positions:
            raise error(f"chunk_tokens={self.chunk_tokens} is over the extractor's {positions} positions; use at "
                        f"most {positions}")


class SnippetPager(Pager):
    """Snippets: every sentence, or every speaker turn (a line), cut at `snippet_tokens` when longer; each framed
    `<s> [query </s>] text </s>` like a page."""

    def pages(self, documents: Sequence[str], query_ids: list[int]) -> list[Unit]:
        body = self.text_budget(query_ids)
        snippets: list[list[Span]] = []
        for index, text in enumerate(documents):
            spans = self._spans(index, text, body)
            policy = self.options.policy
            if policy == "turn" or (policy == "auto" and is_dialogue(text)):
                snippets += [page for turn in by_line(text, spans) for page in self._fill(turn, body)]
            else:
                snippets += [[span] for span in spans]
        return [self._unit(documents, snippet, query_ids) for snippet in snippets]


def _chunks(units: Sequence[Unit], budget: int) -> list[list[int]]:
    """Consecutive units packed greedily into chunks of at most `budget` tokens (the units' own head, then each
    unit's text and its </s>): unit indices per chunk. A unit alone always fits: it is as long as its chunk."""
    chunks: list[list[int]] = []
    size = budget + 1
    for i, unit in enumerate(units):
        need = len(unit.text_ids) + 1
        if size + need > budget:
            chunks.append([])
            size = unit.head
        chunks[-1].append(i)
        size += need
    return chunks


def extractor_runs(units: Sequence[Unit], query_ids: Sequence[int], options: SnippetOptions,
                   size: int) -> list[tuple[int, int]]:
    """Runs of at most `size` chunks: [first, end) units each, starting at chunk bounds."""
    chunks = _chunks(units, options.chunk_tokens)
    return [(chunks[k][0], chunks[min(k + size, len(chunks)) - 1][-1] + 1) for k in range(0, len(chunks), size)]


def extractor_inputs(units: Sequence[Unit], query_ids: Sequence[int], options: SnippetOptions) -> dict[str, np.ndarray]:
    """One run's chunks, `<s> [query </s>] text </s> text </s> ...` in the units' own ids: input_ids,
    attention_mask (C, L) and the flat index of the </s> after each unit."""
    rows, separators = [], []
    for chunk in _chunks(units, options.chunk_tokens):
        first = units[chunk[0]]
        ids = list(first.token_ids[: first.head])
        for i in chunk:
            ids += list(units[i].token_ids[units[i].head :])  # text and its </s>
            separators.append((len(rows), len(ids) - 1))
        rows.append(ids)
    length = max(len(r) for r in rows)
    input_ids = np.zeros((len(rows), length), dtype=np.int64)  # masked positions: any id in the vocabulary
    attention_mask = np.zeros((len(rows), length), dtype=np.int64)
    for r, ids in enumerate(rows):
        input_ids[r, : len(ids)], attention_mask[r, : len(ids)] = ids, 1
    flat = np.array([r * length + p for r, p in separators], dtype=np.int64)
    return {C.INPUT_IDS: input_ids, C.ATTENTION_MASK: attention_mask, SEPARATORS: flat}


def extractor_memory(model: dict[str, Any], inputs: dict[str, np.ndarray]) -> int:
    """Working memory of one extractor run: its inputs and an encoder pass over its chunks."""
    extractor = KIND.model_config(model).extractor
    rows, length = inputs[C.INPUT_IDS].shape
    return arrays_bytes(inputs) + encoder_pass(rows, length, extractor.d_model, extractor.heads, extractor.ffn_dim)


def own_ids(units: Sequence[Unit], query: str | None, tokenizer, chunk_tokens: int, start: int,
            separator: int) -> tuple[list[Unit], list[int]]:
    """The snippets and the query in the ids of an extractor's own tokenizer: each unit `[start] [query [separator]]
    text [separator]` (its text cut so that it fits a chunk alone, the query to half a chunk), and the query ids."""
    query_ids = tokenizer.encode(query, add_special_tokens=False).ids[: chunk_tokens // 2] if query else []
    head = [start, *query_ids, separator] if query_ids else [start]
    room = chunk_tokens - len(head) - 1
    encodings = tokenizer.encode_batch([u.text for u in units], add_special_tokens=False) if units else []
    framed = [replace(u, token_ids=(*head, *enc.ids[:room], separator), head=len(head), tail=1)
              for u, enc in zip(units, encodings)]
    return framed, query_ids


def reframe(units: Sequence[Unit], query: str | None, tokenizer, options: SnippetOptions,
            model: dict[str, Any]) -> tuple[list[Unit], list[int]]:
    """`own_ids` with the extractor's start and separator ids."""
    extractor = KIND.model_config(model).extractor
    return own_ids(units, query, tokenizer, options.chunk_tokens, extractor.start_token_id,
                   extractor.separator_token_id)


def reads_own_tokenizer(model: dict[str, Any]) -> bool:
    return bool((model.get("extractor") or {}).get("own_tokenizer"))


def extractor_vocab_size(model: dict[str, Any]) -> int:
    return KIND.model_config(model).extractor.vocab_size


EXTRACTOR_TOKENIZER = OwnTokenizer("extractor_tokenizer.json", reads_own_tokenizer, extractor_vocab_size, reframe)


def reads_tfidf(model: dict[str, Any]) -> bool:
    return bool((model.get("extractor") or {}).get("tfidf"))


def keep(units: Sequence[Unit], scores: np.ndarray, options: SnippetOptions) -> list[Unit]:
    """The top_k snippets by extractor score, in their order in the input."""
    return keep_top(units, scores, options.top_k, ranked=False)


def graphs(model: dict[str, Any]) -> dict[str, GraphIO]:
    """extractor, encoder and decoder IO; the encoder and decoder are laid out as PageSum's."""
    extractor = GraphIO(
        "extractor.onnx",
        inputs=(TensorIO(C.INPUT_IDS, "int64", {0: "chunks", 1: "length"}),
                TensorIO(C.ATTENTION_MASK, "int64", {0: "chunks", 1: "length"}),
                TensorIO(SEPARATORS, "int64", {0: "snippets"}),
                *tfidf_input(reads_tfidf(model), "snippets")),
        outputs=(TensorIO(SCORES, "float32", {0: "snippets"}),),
    )
    return {"extractor": extractor, **per_unit_graphs(model)}


class DyleLayout(PageSumLayout):
    """PageSum's layout (snippets encoded alone, a decoder per snippet); the step marginalizes token distributions,
    so the LM head reads every snippet's rows (B*U*K), not mixed ones."""

    def head_rows(self, items: int, width: int, beams: int) -> int:
        return items * width * beams


UNITS = ("snippets (sentences, or the speaker turns of a dialogue) the extractor kept, each with its extractor score; "
         "a unit's weight is its dynamic weight p(snippet | summary so far) in the step's marginalization")

KIND = register(Kind("dyle", REVISION, UNITS, SnippetOptions, SnippetPager, graphs, DyleLayout(), DyleConfig,
                     Selection("extractor", extractor_inputs, SCORES, keep, extractor_runs,
                               extractor_memory, EXTRACTOR_TOKENIZER, tfidf_features(reads_tfidf)),
                     backbones=(BART, LLAMA), llama_config=LlamaDyleConfig))
