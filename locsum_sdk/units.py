"""Text -> units: sentence splitting, the three paging policies of PageSum, token budgets.

A unit keeps its character span in its source document, so a user can see which text each page was. Token ids
of a unit are the concatenation of its sentences' ids (each sentence tokenized with a leading space), framed as
`<s> [query </s>] text </s>`; training and serving both build pages here, so both see identical inputs.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Protocol, Sequence

from .errors import EmptyInputError, EncodingError, InputError, InputTooLongError, OptionError

logger = logging.getLogger("locsum_sdk")

POLICIES = ("spatial", "discourse", "document")

_LINE = re.compile(r"[^\n]+")
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*\s+(?=[^a-z\s])")
_HEADING = re.compile(
    r"^(#{1,6}\s+\S.*"  # markdown
    r"|(?:\d+(?:\.\d+)*\.?|[IVXLC]+\.|[A-Z]\.)\s+[A-Z][^.!?]{0,100}"  # numbered: "2.1 Results", "IV. Costs"
    r"|[A-Z][A-Z0-9 ,&:'()/-]{2,80}"  # ALL CAPS line
    r")$"
)


class Tokenizer(Protocol):
    """What paging needs of a tokenizer (`tokenizers.Tokenizer` has it)."""

    def encode_batch(self, inputs: list[str], add_special_tokens: bool = True) -> list: ...


@dataclass(frozen=True)
class SpecialTokens:
    bos: int = 0
    pad: int = 1
    eos: int = 2
    decoder_start: int = 2


@dataclass(frozen=True)
class PagingOptions:
    """How text becomes pages."""

    policy: str = "spatial"  # one of POLICIES
    max_pages: int = 8  # most pages one input may use
    page_tokens: int = 1024  # token budget of one page, special tokens and query included
    num_pages: int | None = None  # spatial only: pages to spread the text over (None: as few as fit)
    truncate: bool = False  # over max_pages: False raises InputTooLongError, True keeps the first pages and warns

    def validate(self) -> None:
        if self.policy not in POLICIES:
            raise OptionError(f"policy={self.policy!r} is not a paging policy; use one of {POLICIES}")
        if self.max_pages < 1 or self.page_tokens < 8:
            raise OptionError("max_pages must be at least 1 and page_tokens at least 8")
        if self.num_pages is not None and not 1 <= self.num_pages <= self.max_pages:
            raise OptionError(f"num_pages={self.num_pages} must be between 1 and max_pages={self.max_pages}")


@dataclass(frozen=True)
class Span:
    document: int  # index of the source document
    start: int  # character offsets in that document
    end: int
    token_ids: tuple[int, ...]  # ids of the text, no special tokens


@dataclass(frozen=True)
class Unit:
    """One unit (a page) of the input."""

    document: int  # index of the source document
    start: int  # character span [start, end) in that document
    end: int
    text: str
    token_ids: tuple[int, ...]  # model input: <s> [query </s>] text </s>

    def to_dict(self) -> dict:
        return {"document": self.document, "start": self.start, "end": self.end, "text": self.text}


def as_documents(text_or_documents: str | bytes | Sequence[str | bytes]) -> list[str]:
    """Validate the input and return it as a list of documents."""
    items = [text_or_documents] if isinstance(text_or_documents, (str, bytes)) else list(text_or_documents)
    if not items:
        raise EmptyInputError("no documents were given; pass a string or a non-empty list of strings")
    documents = []
    for index, item in enumerate(items):
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError as err:
                raise EncodingError(
                    f"document {index} is not valid UTF-8 (byte {err.start}); decode it with its real encoding first"
                ) from None
        if not isinstance(item, str):
            raise InputError(f"document {index} is a {type(item).__name__}; pass str or UTF-8 bytes")
        if not item.strip():
            raise EmptyInputError(f"document {index} is empty or only whitespace; remove it or give it text")
        documents.append(item)
    return documents


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of `text`; every line break also ends a sentence, and a heading line
    ("2. Methods") is one sentence."""
    spans = []
    for line in _LINE.finditer(text):
        start = line.start()
        if _HEADING.match(line.group().strip()):
            spans.append((start, line.end()))
            continue
        for end_mark in _SENTENCE_END.finditer(line.group()):
            spans.append((start, line.start() + end_mark.end()))
            start = line.start() + end_mark.end()
        spans.append((start, line.end()))
    return [trimmed for s, e in spans if (trimmed := _strip(text, s, e))]


def _by_document(page: list[Span]) -> list[list[Span]]:
    """Cut a page where its spans change document, so every unit lies inside one document."""
    parts: list[list[Span]] = []
    for span in page:
        if not parts or parts[-1][-1].document != span.document:
            parts.append([])
        parts[-1].append(span)
    return parts


def _strip(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


class Pager:
    """Builds units from documents with one tokenizer, special tokens and options."""

    def __init__(self, tokenizer: Tokenizer, special: SpecialTokens, options: PagingOptions):
        options.validate()
        self.tokenizer, self.special, self.options = tokenizer, special, options

    def __call__(self, documents: Sequence[str], query: str | None = None) -> list[Unit]:
        """Documents (already validated by `as_documents`) -> pages within the token budget."""
        query_ids = self._query_ids(query)
        frame = 2 + (len(query_ids) + 1 if query_ids else 0)
        body = self.options.page_tokens - frame
        if self.options.policy == "document":
            groups = [self._fill(self._spans(i, doc, body), body) for i, doc in enumerate(documents)]
            pages = [page for group in groups for page in group]
        elif self.options.policy == "discourse":
            pages = self._sections(documents, body)
        else:
            spans = [s for i, doc in enumerate(documents) for s in self._spans(i, doc, body)]
            pages = [part for page in self._spread(spans, body) for part in _by_document(page)]
        pages = self._limit(pages)
        return [self._unit(documents, page, query_ids) for page in pages]

    def _query_ids(self, query: str | None) -> list[int]:
        if query is None:
            return []
        if not isinstance(query, str) or not query.strip():
            raise EmptyInputError("query is empty or only whitespace; pass None for generic summarization")
        ids = self.tokenizer.encode_batch([" " + query.strip()], add_special_tokens=False)[0].ids
        if len(ids) > self.options.page_tokens // 2:
            raise InputTooLongError(
                f"the query has {len(ids)} tokens; it must fit in half a page ({self.options.page_tokens // 2})"
            )
        return ids

    def _spans(self, document: int, text: str, budget: int) -> list[Span]:
        """Sentences of one document with their token ids; a sentence over `budget` is cut at token bounds."""
        sentences = split_sentences(text)
        encodings = self.tokenizer.encode_batch([" " + text[s:e] for s, e in sentences], add_special_tokens=False)
        spans = []
        for (start, end), enc in zip(sentences, encodings):
            ids = list(enc.ids)
            if len(ids) <= budget:
                spans.append(Span(document, start, end, tuple(ids)))
                continue
            piece = " " + text[start:end]
            starts = [max(a - 1, 0) for a, _ in enc.offsets]  # char offset of each token in the sentence
            first = 0
            while first < len(ids):
                stop = min(first + budget, len(ids))
                if stop < len(ids):  # cut before a token that starts a word, if one is in reach
                    words = [j for j in range(first + 1, stop + 1)
                             if piece[enc.offsets[j][0]].isspace() or piece[enc.offsets[j][0] - 1].isspace()]
                    stop = words[-1] if words else stop
                piece_end = end if stop == len(ids) else start + starts[stop]
                piece_start, piece_end = _strip(text, start + starts[first], piece_end) or (piece_end, piece_end)
                spans.append(Span(document, piece_start, piece_end, tuple(ids[first:stop])))
                first = stop
        return spans

    @staticmethod
    def _fill(spans: list[Span], budget: int) -> list[list[Span]]:
        """Greedy: consecutive spans into as few pages as fit the budget."""
        pages: list[list[Span]] = []
        size = budget + 1
        for span in spans:
            if size + len(span.token_ids) > budget:
                pages.append([])
                size = 0
            pages[-1].append(span)
            size += len(span.token_ids)
        return pages

    def _spread(self, spans: list[Span], budget: int) -> list[list[Span]]:
        """Spatial paging: spans over n pages of near-equal length, in order. n is `num_pages` or the fewest
        pages that fit; when equal pages cannot fit the budget, pages are filled greedily instead."""
        filled = self._fill(spans, budget)
        n = max(self.options.num_pages or 1, len(filled))
        counts = [len(s.token_ids) for s in spans]
        total = sum(counts)
        pages: list[list[Span]] = [[] for _ in range(n)]
        seen = 0
        for span, count in zip(spans, counts):
            pages[min(int((seen + count / 2) * n / total), n - 1)].append(span)
            seen += count
        pages = [p for p in pages if p]
        return pages if all(sum(len(s.token_ids) for s in p) <= budget for p in pages) else filled

    def _sections(self, documents: Sequence[str], budget: int) -> list[list[Span]]:
        """Discourse paging: one page per section (headings start sections); long sections are split,
        and when there are more sections than pages, neighbours that fit one page together are merged."""
        sections: list[list[Span]] = []
        for index, text in enumerate(documents):
            current: list[Span] = []
            for span in self._spans(index, text, budget):
                if current and _HEADING.match(text[span.start : span.end]):
                    sections.append(current)
                    current = []
                current.append(span)
            sections.append(current)
        pages = [page for section in sections for page in self._fill(section, budget)]
        if len(pages) > self.options.max_pages:
            merged: list[list[Span]] = []
            for page in pages:
                if merged and merged[-1][-1].document == page[0].document and (
                    sum(len(s.token_ids) for s in merged[-1] + page) <= budget
                ):
                    merged[-1] = merged[-1] + page
                else:
                    merged.append(page)
            pages = merged
        return pages

    def _limit(self, pages: list[list[Span]]) -> list[list[Span]]:
        limit = self.options.max_pages
        if len(pages) <= limit:
            return pages
        tokens = sum(len(s.token_ids) for p in pages for s in p)
        if not self.options.truncate:
            raise InputTooLongError(
                f"the input ({tokens} tokens) needs {len(pages)} pages of at most {self.options.page_tokens} tokens, "
                f"but max_pages={limit}; raise max_pages (up to what memory allows) or pass truncate=True (--truncate) "
                f"to keep the first {limit} pages"
            )
        kept = sum(len(s.token_ids) for p in pages[:limit] for s in p)
        logger.warning("input truncated: kept the first %d of %d pages (%d of %d tokens)", limit, len(pages), kept, tokens)
        return pages[:limit]

    def _unit(self, documents: Sequence[str], page: list[Span], query_ids: list[int]) -> Unit:
        sp = self.special
        head = [sp.bos] + (query_ids + [sp.eos] if query_ids else [])
        ids = head + [t for span in page for t in span.token_ids] + [sp.eos]
        document, start, end = page[0].document, page[0].start, page[-1].end
        return Unit(document, start, end, documents[document][start:end], tuple(ids))
