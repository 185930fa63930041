"""`LiveDocument`: an input that grows while it is summarized (a meeting transcript as it is spoken, a news feed's
cluster of articles), and its current summary, re-made from cached units so that only the new or changed ones are
encoded."""

from __future__ import annotations

import codecs
import copy
from typing import Any

from .errors import EmptyInputError, EncodingError, InputError
from .summarizer import Summarizer, Summary
from .unit_cache import UnitCache
from .units import as_string, has_visible_text


class LiveDocument:
    """A growing text and its summary.

    Each `summary()` summarizes the whole input as it stands, exactly as `summarizer.summarize(live.documents,
    query, live.options)` would (same units, the same tokens), but the units already encoded come from a
    `UnitCache`: after text is appended only the last unit (which the new text may change) and the new ones are
    encoded. The input is one text, or a cluster of documents that grows (`add_document`). The cache serves kinds
    whose units are encoded alone (PageSum, DYLE); with the others each summary encodes the whole input again.

    Example:
        >>> live = LiveDocument(summarizer, num_beams=2)
        >>> for line in transcript_lines:
        ...     live.append(line + "\\n")
        ...     print(live.summary().text)
    """

    def __init__(self, summarizer: Summarizer, text: str | bytes = "", query: str | None = None,
                 cache: UnitCache | None = None, **overrides: Any):
        """summarizer: the model; text: the text so far; query: asked of every summary; cache: where encoded units
        are kept (default: the summarizer's `unit_cache`, else a new `UnitCache()` of 1 GiB); **overrides: options
        of every summary (any field of the kind's unit options, `LimitOptions` or `GenerationOptions`), over the
        summarizer's defaults and the unit options under which appended text changes only the last unit (the
        kind's `GROWING_TEXT`: PageSum fills pages in order, `policy="document"`, where its default spreads the
        text evenly over its pages)."""
        if not isinstance(summarizer, Summarizer):
            raise InputError(f"summarizer is a {type(summarizer).__name__}; pass a locsum_sdk.Summarizer")
        if query is not None and not isinstance(query, str):
            raise InputError(f"query is a {type(query).__name__}; pass a string or None")
        growing = getattr(type(summarizer.paging), "GROWING_TEXT", {})
        # refuses unknown or invalid options now, not at summary()
        self.options = summarizer.options(**{**growing, **overrides})
        self.query = query
        self.summarizer = copy.copy(summarizer)  # shares the loaded model; only its unit cache is this document's
        if cache is None:
            cache = summarizer.unit_cache if summarizer.unit_cache is not None else UnitCache()
        self.summarizer.unit_cache = cache
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._documents: list[list[str]] = [[]]  # each document's parts, joined when read
        self._received = 0  # bytes given to append, for error messages
        self._last: tuple[list[str], Summary] | None = None
        self.append(text)

    @property
    def cache(self) -> UnitCache:
        return self.summarizer.unit_cache

    @property
    def documents(self) -> list[str]:
        """Every document so far (bytes that end inside a UTF-8 character wait for the rest of it)."""
        for parts in self._documents:
            if len(parts) > 1:
                parts[:] = ["".join(parts)]
        return [parts[0] if parts else "" for parts in self._documents]

    @property
    def text(self) -> str:
        """The documents so far, a blank line between two (the text itself while there is one)."""
        return "\n\n".join(self.documents)

    def append(self, text: str | bytes) -> None:
        """Add `text` at the end of the last document, as given (include the space or newline that separates it
        from what came before). Bytes are UTF-8 and may be cut anywhere, even inside a character."""
        if isinstance(text, bytes):
            received, self._received = self._received, self._received + len(text)
            try:
                text = self._decoder.decode(text)
            except UnicodeDecodeError:
                self._decoder.reset()
                raise EncodingError(f"the bytes appended after the first {received} are not valid UTF-8; decode "
                                    "them with their real encoding first (they were not added)") from None
        self._documents[-1].append(as_string(text, "the appended text"))

    def add_document(self, text: str | bytes = "") -> None:
        """Start a new document (a cluster that grows: a news feed, a thread) with `text`; `append` then adds to
        it. The earlier documents' units stay cached. The last document must not end inside a UTF-8 character."""
        try:
            self._decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            self._decoder.reset()
            raise EncodingError("the last document ends inside a UTF-8 character; append the rest of its bytes "
                                "before starting another document") from None
        if self.documents[-1]:  # the input's first document may still be empty: it takes `text`
            self._documents.append([])
        self.append(text)

    def replace(self, text: str | bytes | list[str | bytes]) -> None:
        """Set the whole input: a text, or a list of documents (a corrected transcript, an edited cluster), each
        str or whole UTF-8 bytes; the units it shares with the old one stay cached. Nothing changes when one is
        refused."""
        items = text if isinstance(text, list) else [text]
        if not items:
            raise InputError("replace takes a text or a non-empty list of documents")
        documents = [as_string(item, f"document {i}") for i, item in enumerate(items)]  # all checked, then set
        self._documents = [[document] for document in documents]
        self._decoder.reset()

    def summary(self) -> Summary:
        """The summary of the input as it stands (made again only when it changed since the last one)."""
        documents = self.documents
        if not any(has_visible_text(document) for document in documents):
            raise EmptyInputError("the live document has no visible text yet; append some before asking for its "
                                  "summary")
        if self._last is None or self._last[0] != documents:
            self._last = (documents, self.summarizer.summarize(documents, self.query, self.options))
        return self._last[1]
