"""`LiveDocument`: a text that grows while it is summarized (a meeting transcript as it is spoken, a running log),
and its current summary, re-made from cached units so that only the new or changed ones are encoded."""

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

    Each `summary()` summarizes the whole text as it stands, exactly as `summarizer.summarize(live.text, query,
    live.options)` would (same units, the same tokens), but the units already encoded come from a `UnitCache`:
    after text is appended only the last unit (which the new text may change) and the new ones are encoded. The
    cache serves kinds whose units are encoded alone (PageSum, DYLE); with the others each summary encodes the
    whole text again.

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
        self._parts: list[str] = []
        self._received = 0  # bytes given to append, for error messages
        self._last: tuple[str, Summary] | None = None
        self.append(text)

    @property
    def cache(self) -> UnitCache:
        return self.summarizer.unit_cache

    @property
    def text(self) -> str:
        """The text so far (bytes that end inside a UTF-8 character wait for the rest of it)."""
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def append(self, text: str | bytes) -> None:
        """Add `text` at the end, as given (include the space or newline that separates it from what came before).
        Bytes are UTF-8 and may be cut anywhere, even inside a character."""
        if isinstance(text, bytes):
            received, self._received = self._received, self._received + len(text)
            try:
                text = self._decoder.decode(text)
            except UnicodeDecodeError:
                self._decoder.reset()
                raise EncodingError(f"the bytes appended after the first {received} are not valid UTF-8; decode "
                                    "them with their real encoding first (they were not added)") from None
        self._parts.append(as_string(text, "the appended text"))

    def replace(self, text: str | bytes) -> None:
        """Set the whole text (a corrected transcript): the units it shares with the old one stay cached."""
        self._parts.clear()
        self._decoder.reset()
        self.append(text)

    def summary(self) -> Summary:
        """The summary of the text as it stands (made again only when the text changed since the last one)."""
        text = self.text
        if not has_visible_text(text):
            raise EmptyInputError("the live document has no visible text yet; append some before asking for its "
                                  "summary")
        if self._last is None or self._last[0] != text:
            self._last = (text, self.summarizer.summarize(text, self.query, self.options))
        return self._last[1]
