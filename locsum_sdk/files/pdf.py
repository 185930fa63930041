"""A PDF's text layer, page by page (PDFium, through pypdfium2): lines in PDFium's reading order, words PDFium marks
as hyphenated at a line's end joined, the lines of a paragraph joined, and running headers and footers left out.

A header or footer is a line among the first or last two of a page whose text, digits aside ("Page 3 of 40" and
"Page 4 of 40" are one line), stands at the top or the bottom of at least half the pages of a document of three
pages or more. A paragraph goes on while its line is nearly as long as the page's long lines (at least 80% of
their 90th percentile) and the next line does not start a list item."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

from ..errors import EncryptedFileError, FileFormatError

SOFT_HYPHEN = "\ufffe"  # how PDFium marks a hyphen it found at the end of a line
EDGE_LINES = 2  # lines at each end of a page that may be a running header or footer
RUNNING_SHARE = 0.5  # share of pages a header or footer stands on
MIN_PAGES_FOR_RUNNING = 3
FULL_LINE = 0.8  # a line this long, relative to the page's long lines, goes on into the next
_DIGITS = re.compile(r"\d+")
_LIST_ITEM = re.compile(r"^([•▪◦‣–*-]|\d{1,3}[.)])\s")  # a line that starts a list item starts a paragraph


def pdf_pages(data: bytes, what: str, password: str | None = None) -> Iterator[str]:
    """The raw text of each page of the PDF `data`, one page at a time; typed errors for an encrypted (or a wrong
    password), damaged or truncated file."""
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(data, password=password)
    except pdfium.PdfiumError as err:
        if "password" in str(err).lower():
            advice = "the password given is not its password" if password else "give its password (--password)"
            raise EncryptedFileError(f"{what} is an encrypted PDF; {advice}") from None
        raise FileFormatError(f"{what} is a damaged or truncated PDF ({err})") from None
    try:
        for index in range(len(document)):
            try:
                page = document[index]
                text_page = page.get_textpage()
                text = text_page.get_text_range()
                text_page.close()
                page.close()
            except pdfium.PdfiumError as err:
                raise FileFormatError(f"{what}: page {index + 1} cannot be read ({err}); the PDF is damaged") from None
            yield text
    finally:
        document.close()


def page_lines(raw: str) -> list[str]:
    """A page's lines, stripped, with the words PDFium marks as hyphenated at a line's end joined."""
    raw = raw.replace("\r\n", "\n").replace("\r", "\n")
    raw = re.sub(SOFT_HYPHEN + r"\s*\n\s*", "", raw).replace(SOFT_HYPHEN, "")
    return [line.strip() for line in raw.split("\n")]


def _edge_keys(lines: list[str]) -> set[str]:
    text = [line for line in lines if line]
    edges = text[:EDGE_LINES] + text[-EDGE_LINES:]
    return {_DIGITS.sub("#", line) for line in edges}


def running_lines(pages: list[list[str]]) -> set[str]:
    """The header and footer lines (digits as '#') of a document's pages (see the module docstring)."""
    if len(pages) < MIN_PAGES_FOR_RUNNING:
        return set()
    counts = Counter(key for lines in pages for key in _edge_keys(lines))
    return {key for key, count in counts.items() if count >= RUNNING_SHARE * len(pages)}


def page_text(lines: list[str], running: set[str]) -> str:
    """A page's text: its header and footer lines left out, each paragraph's lines joined by a space, paragraphs
    by a newline."""
    text = [line for line in lines if line]
    edges = set(range(min(EDGE_LINES, len(text)))) | set(range(max(len(text) - EDGE_LINES, 0), len(text)))
    kept = [line for i, line in enumerate(text) if not (i in edges and _DIGITS.sub("#", line) in running)]
    if not kept:
        return ""
    lengths = sorted(len(line) for line in kept)
    full = FULL_LINE * lengths[min(len(lengths) - 1, int(0.9 * len(lengths)))]
    paragraphs: list[str] = [kept[0]]
    for previous, line in zip(kept, kept[1:]):
        if len(previous) >= full and not _LIST_ITEM.match(line):
            paragraphs[-1] += " " + line
        else:
            paragraphs.append(line)
    return "\n".join(paragraphs)
