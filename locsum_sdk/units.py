"""Text -> units: sentence splitting, the three paging policies of PageSum, token budgets.

A unit keeps its character span in its source document, so a user can see which text each page was. Token ids
of a unit are the concatenation of its sentences' ids (each sentence tokenized with a leading space), framed as
`<s> [query </s>] text </s>`; training and serving both build pages here, so both see identical inputs.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .errors import EmptyInputError, EncodingError, InputError, InputTooLongError, OptionError
from .validation import check_choice, check_int

logger = logging.getLogger("locsum_sdk")

POLICIES = ("spatial", "discourse", "document")
MIN_PAGE_TOKENS = 8  # room for the frame and a few tokens of text

# Line breaks: LF, CRLF, a lone CR (classic Mac files), and Unicode's line and paragraph separators; every
# line, turn and block below splits on the same ones.
_BREAK = "\r\n|\r(?!\n)|\n|\u2028|\u2029"
_BREAKS = re.compile(_BREAK)
_BLANK_LINE = re.compile(f"(?:{_BREAK})[ \t]*(?:{_BREAK})|\u2029")
_LINE = re.compile("[^\r\n\u2028\u2029]+")
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
    """The special ids, and the frame of a unit's tokens: `head [query] text [query] tail`, the query (when there
    is one) between `query_head` and `query_tail`, before the text or (`query_first` false) after it. The default
    frame is BART's, `<s> [query </s>] text </s>`; a chat model's is its prompt around the text, ending where the
    answer begins (its last token is then `decoder_start`, the summary's first input)."""

    bos: int = 0
    pad: int = 1
    eos: int = 2
    decoder_start: int = 2
    unit_head: tuple[int, ...] | None = None  # None: (bos,)
    unit_tail: tuple[int, ...] | None = None  # None: (eos,)
    query_head: tuple[int, ...] = ()
    query_tail: tuple[int, ...] | None = None  # None: (eos,)
    query_first: bool = True

    def __post_init__(self) -> None:
        for name in ("unit_head", "unit_tail", "query_head", "query_tail"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))  # a manifest's lists

    @property
    def head(self) -> tuple[int, ...]:
        return (self.bos,) if self.unit_head is None else self.unit_head

    @property
    def tail(self) -> tuple[int, ...]:
        return (self.eos,) if self.unit_tail is None else self.unit_tail

    def framed_query(self, query_ids: Sequence[int]) -> list[int]:
        """The query's ids within its own frame, or none without a query."""
        if not query_ids:
            return []
        after = (self.eos,) if self.query_tail is None else self.query_tail
        return [*self.query_head, *query_ids, *after]

    def frame_size(self, query_ids: Sequence[int]) -> int:
        """Ids a unit spends on its frame and the query."""
        return len(self.head) + len(self.tail) + len(self.framed_query(query_ids))

    def frame(self, text_ids: Sequence[int], query_ids: Sequence[int]) -> tuple[tuple[int, ...], int, int]:
        """A unit's ids around `text_ids` -> (ids, ids before the text, ids after it)."""
        query = self.framed_query(query_ids)
        before = [*self.head, *query] if self.query_first else list(self.head)
        after = list(self.tail) if self.query_first else [*query, *self.tail]
        return (*before, *text_ids, *after), len(before), len(after)


@dataclass(frozen=True)
class PagingOptions:
    """How text becomes pages. How much input is accepted is `limits.LimitOptions`."""

    UNIT_TOKENS = "page_tokens"  # the field that bounds one unit's tokens (at most the model's positions)
    # options under which appended text changes only the last unit: spatial pages are spread evenly over the
    # whole text, so every page moves when it grows; "document" fills pages in order (`LiveDocument` takes these)
    GROWING_TEXT = {"policy": "document"}

    policy: str = "spatial"  # one of POLICIES
    page_tokens: int = 1024  # token budget of one page, special tokens and query included
    num_pages: int | None = None  # spatial only: pages to spread the text over (None: as few as fit)

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, POLICIES)
        check_int("page_tokens", self.page_tokens, MIN_PAGE_TOKENS)
        check_int("num_pages", self.num_pages, 1, optional=True)
        if self.num_pages is not None and self.policy != "spatial":
            raise OptionError(f"num_pages={self.num_pages} spreads text over equal pages, which only "
                              f"policy='spatial' makes; with policy={self.policy!r} leave num_pages None or pass "
                              "policy='spatial'")


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
    token_ids: tuple[int, ...]  # model input: the text in its frame (`SpecialTokens.frame`), <s> [query </s>] text </s>
    head: int = 1  # ids before the text: <s> [query </s>]
    score: float | None = None  # its score in the kind's selection stage, when the kind has one
    tail: int = 1  # ids after the text: </s>

    @property
    def text_ids(self) -> tuple[int, ...]:
        """The ids of the page's text alone (no special tokens, no query)."""
        return self.token_ids[self.head : len(self.token_ids) - self.tail]

    def to_dict(self) -> dict:
        out = {"document": self.document, "start": self.start, "end": self.end, "text": self.text}
        return out if self.score is None else {**out, "score": self.score}


def as_documents(text_or_documents: object) -> list[str]:
    """Validate one input (a string, UTF-8 bytes, or a list or tuple of them) and return its documents."""
    if isinstance(text_or_documents, (str, bytes)):
        items = [text_or_documents]
    elif isinstance(text_or_documents, (list, tuple)):
        items = list(text_or_documents)
    else:
        raise InputError(
            f"the input is a {type(text_or_documents).__name__}; pass a string, UTF-8 bytes, or a list of them "
            "(one per document)"
        )
    if not items:
        raise EmptyInputError("no documents were given; pass a string or a non-empty list of strings")
    return [as_text(item, f"document {index}") for index, item in enumerate(items)]


def as_text(item: object, what: str) -> str:
    """`item` as text: str or UTF-8 bytes, encodable, with at least one visible character."""
    item = as_string(item, what)
    if not has_visible_text(item):
        raise EmptyInputError(
            f"{what} is empty or has no visible characters (only whitespace, control, format or combining "
            "characters); remove it or give it text"
        )
    return item


def as_string(item: object, what: str) -> str:
    """`item` as a string: str or UTF-8 bytes, encodable as UTF-8 (it may be empty)."""
    if isinstance(item, bytes):
        try:
            item = item.decode("utf-8")
        except UnicodeDecodeError as err:
            raise EncodingError(
                f"{what} is not valid UTF-8 (byte {err.start}); decode it with its real encoding first"
            ) from None
    if not isinstance(item, str):
        raise InputError(f"{what} is a {type(item).__name__}; pass str or UTF-8 bytes")
    try:
        item.encode("utf-8")
    except UnicodeEncodeError as err:
        raise EncodingError(
            f"{what} holds a lone surrogate ({item[err.start]!r} at character {err.start}), which is not text: it "
            "comes from bytes decoded with errors='surrogateescape' or a broken JSON escape; decode the source "
            "with its real encoding (or errors='replace') first"
        ) from None
    return item


_VISIBLE = ("L", "N", "P", "S")  # Unicode major categories of characters that show on their own


def has_visible_text(text: str) -> bool:
    """True when `text` has a letter, digit, punctuation or symbol: not only spaces, controls, format characters
    (zero-width spaces, bidi marks, BOMs), unassigned or private code points, or combining marks, which have no
    character to combine with when nothing else is there."""
    return any(unicodedata.category(char)[0] in _VISIBLE for char in text)


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


_TURN = re.compile(r"^[^:]{1,40}:(\s|$)")  # "PhD D: so ..." starts a speaker turn (matched on one line)


def is_dialogue(text: str) -> bool:
    """Most non-empty lines start with a speaker tag ("Name: ...")."""
    lines = [line for line in _LINE.findall(text) if line.strip()]
    return bool(lines) and sum(bool(_TURN.match(line.strip())) for line in lines) * 2 > len(lines)


def by_line(text: str, spans: list[Span]) -> list[list[Span]]:
    """Spans grouped by the line of `text` they start on (a dialogue's turns), in order."""
    starts = [0] + [m.end() for m in _BREAKS.finditer(text)]
    groups: dict[int, list[Span]] = {}
    for span in spans:
        groups.setdefault(bisect.bisect_right(starts, span.start), []).append(span)
    return list(groups.values())


def by_block(text: str, spans: list[Span]) -> list[list[Span]]:
    """Spans grouped by the block of `text` they start in, blocks being separated by blank lines (paragraphs)."""
    starts = [0] + [m.end() for m in _BLANK_LINE.finditer(text)]
    groups: dict[int, list[Span]] = {}
    for span in spans:
        groups.setdefault(bisect.bisect_right(starts, span.start), []).append(span)
    return list(groups.values())


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
    """Builds units from documents with one tokenizer, special tokens and options.

    Paging is linear in the input length whatever its punctuation: a sentence is tokenized in pieces of at most
    `MAX_PIECE_CHARS` characters (cut at whitespace where there is some), and a sentence over the page budget is
    cut at token bounds, before a word where one is in reach."""

    def __init__(self, tokenizer: Tokenizer, special: SpecialTokens, options: PagingOptions,
                 max_tokens: int | None = None):
        """max_tokens: the input limit; discourse paging merges neighbouring sections when their count exceeds
        the pages that many tokens fill."""
        self.tokenizer, self.special, self.options, self.max_tokens = tokenizer, special, options, max_tokens

    def query_ids(self, query: str | None) -> list[int]:
        """Token ids of a query (validated): it must fit in half a unit."""
        if query is None:
            return []
        if not isinstance(query, (str, bytes)):
            raise InputError(f"query is a {type(query).__name__}; pass a string, or None for a generic summary")
        query = as_text(query, "query").strip()
        ids = self.tokenizer.encode_batch([" " + query], add_special_tokens=False)[0].ids
        name = self.options.UNIT_TOKENS
        budget = getattr(self.options, name)
        if len(ids) > budget // 2:
            raise InputTooLongError(
                f"the query has {len(ids)} tokens; it must fit in half a unit ({budget // 2} of {name}={budget}): "
                f"shorten it or raise {name}"
            )
        return ids

    def text_budget(self, query_ids: Sequence[int], framed: bool = True) -> int:
        """Ids a unit has for its text once its frame (and, when `framed`, the query) is spent: refused when that
        leaves none (a bundle's prompt can be long: raise the unit size, or shorten the query)."""
        name = self.options.UNIT_TOKENS
        unit = getattr(self.options, name)
        spent = self.special.frame_size(query_ids if framed else [])
        if unit - spent >= 1:
            return unit - spent
        if framed and query_ids:
            raise InputTooLongError(f"the query and the bundle's prompt around each unit take {spent} of "
                                    f"{name}={unit} tokens, leaving none for the text: shorten the query or raise "
                                    f"{name}")
        raise OptionError(f"{name}={unit} leaves no tokens for the text: the bundle's prompt around each unit takes "
                          f"{spent}; raise {name}")

    def __call__(self, documents: Sequence[str], query: str | None = None) -> list[Unit]:
        """Documents (already validated by `as_documents`) -> pages within the token budget."""
        return self.pages(documents, self.query_ids(query))

    def pages(self, documents: Sequence[str], query_ids: list[int]) -> list[Unit]:
        """As calling the pager, with the query already tokenized by `query_ids`."""
        body = self.text_budget(query_ids)
        if self.options.policy == "document":
            groups = [self._fill(self._spans(i, doc, body), body) for i, doc in enumerate(documents)]
            pages = [page for group in groups for page in group]
        elif self.options.policy == "discourse":
            pages = self._sections(documents, body)
        else:
            spans = [s for i, doc in enumerate(documents) for s in self._spans(i, doc, body)]
            pages = [part for page in self._spread(spans, body) for part in _by_document(page)]
        return [self._unit(documents, page, query_ids) for page in pages]

    def _spans(self, document: int, text: str, budget: int) -> list[Span]:
        """Sentences of one document with their token ids; a sentence over `budget` is cut at token bounds."""
        pieces = [p for s, e in split_sentences(text) for p in _pieces(text, s, e)]
        encodings = self.tokenizer.encode_batch([" " * lead + text[s:e] for s, e, lead, _ in pieces],
                                                add_special_tokens=False)
        spans: list[Span] = []
        sentence: list[tuple[int, int, int, list[int], list[tuple[int, int]]]] = []
        for (start, end, lead, last), enc in zip(pieces, encodings):
            sentence.append((start, end, lead, enc.ids, enc.offsets))
            if last:
                spans.extend(self._cut(document, text, sentence, budget))
                sentence = []
        return spans

    @staticmethod
    def _cut(document: int, text: str, pieces: list, budget: int) -> list[Span]:
        """One sentence (tokenized in pieces) as spans of at most `budget` ids, cut before a word where possible."""
        ids = [t for *_, piece_ids, _ in pieces for t in piece_ids]
        if len(ids) <= budget:
            return [Span(document, pieces[0][0], pieces[-1][1], tuple(ids))]
        starts: list[int] = []  # character offset in `text` where each token starts
        word: list[bool] = []  # the token starts a word (whitespace before it)
        for start, _, lead, _, offsets in pieces:
            for a, _ in offsets:  # offsets count the leading space added before the piece
                position = start + max(a - lead, 0)
                starts.append(position)
                word.append((lead and a <= lead) or text[position - 1].isspace() or text[position].isspace())
        spans, first = [], 0
        while first < len(ids):
            stop = min(first + budget, len(ids))
            if stop < len(ids):
                cut = next((j for j in range(stop, first, -1) if word[j]), stop)
                stop = cut
            end = pieces[-1][1] if stop == len(ids) else starts[stop]
            span_start, span_end = _strip(text, starts[first], end) or (end, end)
            spans.append(Span(document, span_start, span_end, tuple(ids[first:stop])))
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
        pages that fit (never more than there are spans); when equal pages cannot fit the budget, pages are
        filled greedily instead."""
        filled = self._fill(spans, budget)
        n = min(max(self.options.num_pages or 1, len(filled)), len(spans))
        counts = [len(s.token_ids) for s in spans]
        total = sum(counts) or 1
        pages: list[list[Span]] = [[] for _ in range(n)]
        seen = 0
        for span, count in zip(spans, counts):
            pages[min(int((seen + count / 2) * n / total), n - 1)].append(span)
            seen += count
        pages = [p for p in pages if p]
        return pages if all(sum(len(s.token_ids) for s in p) <= budget for p in pages) else filled

    def _sections(self, documents: Sequence[str], budget: int) -> list[list[Span]]:
        """Discourse paging: one page per section (headings start sections); long sections are split, and when
        there are more sections than `max_tokens` fill pages, neighbours that fit one page together are merged."""
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
        if self.max_tokens is not None and len(pages) > math.ceil(self.max_tokens / budget):
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

    def _unit(self, documents: Sequence[str], page: list[Span], query_ids: list[int]) -> Unit:
        ids, head, tail = self.special.frame([t for span in page for t in span.token_ids], query_ids)
        document, start, end = page[0].document, page[0].start, page[-1].end
        return Unit(document, start, end, documents[document][start:end], ids, head, tail=tail)


MAX_PIECE_CHARS = 2000  # longest text handed to the tokenizer at once


def _pieces(text: str, start: int, end: int) -> list[tuple[int, int, int, bool]]:
    """A sentence as (start, end, lead, last) pieces of at most MAX_PIECE_CHARS characters, cut before a
    whitespace run where one is in reach, so words stay whole and tokenize as in the whole sentence. `lead` is
    the spaces to tokenize the piece with: 1, as every sentence, or 0 after a cut inside a word."""
    pieces = []
    lead = 1
    while end - start > MAX_PIECE_CHARS:
        limit = start + MAX_PIECE_CHARS
        cut = limit
        while cut > start + MAX_PIECE_CHARS // 2 and not text[cut].isspace():
            cut -= 1
        if not text[cut].isspace():
            cut = limit
        while cut > start and text[cut - 1].isspace():
            cut -= 1
        cut = cut if cut > start else limit
        pieces.append((start, cut, lead, False))
        lead = int(text[cut].isspace())
        start = cut
        while start < end and text[start].isspace():
            start += 1
    pieces.append((start, end, lead, True))
    return pieces
