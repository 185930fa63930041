"""The files people hold, read as text with their structure: PDF (its text layer, page by page), HTML (its main
text), Word (.docx), Markdown and plain text, the type known from the content (`detect`). A file's text is cut
into parts, each a document of the input, so that a kind's units follow them: a PDF's pages (a run of short ones
together), a marked-up file's heading sections (plain text stays one document, as before). Every part keeps where
it came from (file, page or heading, character span in the extracted text) for `Summary.units`.

Bad files are refused before any model work with a typed error (`locsum_sdk.errors`): a type not read, a damaged
file, an encrypted PDF, one with no text layer, a file over `FileLimits.max_bytes` or a DOCX whose archive would
expand past it. Extraction reads a PDF one page at a time and stops at `FileLimits.max_chars`.
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EmptyInputError, FileTooLargeError, InputError, InputTooLongError, MemoryLimitError, NoTextError
from ..extras import DOCX, HTML, MARKDOWN, PDF, require
from ..memory import size_text
from ..units import as_text, has_visible_text
from .detect import FORMATS, detect

__all__ = ["FORMATS", "FileLimits", "FileText", "Part", "detect", "read_bytes", "read_file"]

HEAD_BYTES = 4096  # what type detection reads
MIN_PART_CHARS = 300  # a shorter page or section joins the next one (a title page, a heading alone)


#: What reading a file holds at its peak, per byte of the file (of a Word document's archive expanded): its bytes,
#: the parsed document (PDFium's, lxml's trees) and the text. Measured on the example meeting written 40 times
#: (1 MiB of text): PDF 7.2, HTML 18.9, Markdown 14.1, text 2.9, Word 6.2; stated with a margin.
READING_BYTES = {"pdf": 12, "html": 30, "markdown": 24, "text": 5, "docx": 10}


@dataclass(frozen=True)
class FileLimits:
    """How much of a file is read: its size on disk (and what its archive may expand to), its extracted text, and
    the memory reading it may take (`READING_BYTES`; `Summarizer.summarize_file` gives the call's memory limit)."""

    max_bytes: int = 256 * 2**20
    max_chars: int = 50_000_000  # about 12M tokens: far past any summarizer's max_tokens
    memory: int | None = None  # bytes; None: not bounded here


@dataclass(frozen=True)
class Part:
    """A piece of a file's extracted text that is one document of the input: pages `page`..`last_page` of a PDF
    (1-based), or the section under `heading`, or the whole text."""

    file: str
    start: int  # character span in the file's extracted text (`FileText.text`)
    end: int
    page: int | None = None
    last_page: int | None = None
    heading: str | None = None

    def locate(self, start: int, end: int) -> dict[str, Any]:
        """Where the span [start, end) of this part's document lies: the file, its page(s) or heading, and the span
        in the file's extracted text."""
        return {**self.to_dict(), "start": self.start + start, "end": self.start + end}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "start": self.start, "end": self.end}
        if self.page is not None:
            out["page"] = self.page
            if self.last_page != self.page:
                out["last_page"] = self.last_page
        if self.heading is not None:
            out["heading"] = self.heading
        return out


@dataclass(frozen=True)
class FileText:
    """A file read: its format, its extracted text and the parts that become the input's documents."""

    file: str
    format: str  # one of FORMATS
    text: str
    parts: list[Part]

    def documents(self) -> list[str]:
        return [self.text[part.start:part.end] for part in self.parts]


def read_file(path: str | os.PathLike, password: str | None = None, limits: FileLimits | None = None,
              name: str | None = None) -> FileText:
    """Read the file at `path` (a PDF opened with `password` when it is encrypted). `name` is the file's name in
    messages and parts (default: the path)."""
    limits = limits or FileLimits()
    path = Path(path)
    what = name or str(path)
    if path.is_dir():
        raise InputError(f"{what} is a folder; give its files (each is one document of one input)")
    if not path.is_file():
        raise InputError(f"{what}: no such file")
    _check_size(path.stat().st_size, what, limits)
    return read_bytes(path.read_bytes(), what, password, limits)


def read_bytes(data: bytes, name: str, password: str | None = None, limits: FileLimits | None = None) -> FileText:
    """Read a file's bytes (an upload), named `name` (its file name tells Markdown from text)."""
    limits = limits or FileLimits()
    _check_size(len(data), name, limits)
    found = detect(data[:HEAD_BYTES], Path(name).name, data)
    _check_memory(found, data, name, limits)
    if found == "pdf":
        require(PDF)
        return _pdf(data, name, password, limits)
    text = _extract(found, data, name, limits)
    if len(text) > limits.max_chars:
        raise InputTooLongError(f"{name} holds {len(text):,} characters of text, over the {limits.max_chars:,} read "
                                "from one file; split it")
    if not has_visible_text(text):
        if found == "text":
            raise EmptyInputError(f"{name} is empty or holds only whitespace; give it text")
        raise NoTextError(f"{name} ({found}) holds no text to summarize")
    parts = [Part(name, 0, len(text))] if found == "text" else sections(text, name)
    return FileText(name, found, text, parts)


def _check_memory(found: str, data: bytes, what: str, limits: FileLimits) -> None:
    """MemoryLimitError, before reading, for a file whose reading would take more than `limits.memory`."""
    if limits.memory is None:
        return
    from .markup import expanded_size

    size = expanded_size(data, what, limits.max_bytes) if found == "docx" else len(data)
    needed = READING_BYTES[found] * size
    if needed > limits.memory:
        raise MemoryLimitError(f"reading {what} ({found}, {size:,} bytes) takes about {size_text(needed)}, over the "
                               f"memory limit of {size_text(limits.memory)}; split the file or raise memory_limit")


def _check_size(size: int, what: str, limits: FileLimits) -> None:
    if size > limits.max_bytes:
        raise FileTooLargeError(f"{what} is {size:,} bytes, over the {limits.max_bytes:,} a file may have; split it, "
                                "or raise FileLimits.max_bytes")


def _extract(found: str, data: bytes, what: str, limits: FileLimits) -> str:
    from . import markup

    if found == "html":
        require(HTML)
        return markup.html_text(data, what)
    if found == "docx":
        require(DOCX)
        return markup.docx_text(data, what, limits.max_bytes)
    text = _decode(data, what)
    if found == "markdown":
        require(MARKDOWN)
        return markup.markdown_text(text, what)
    return text


def _decode(data: bytes, what: str) -> str:
    """Text bytes as a string: UTF-16 by its byte order mark, else UTF-8 (its mark left out)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise InputError(f"{what} starts as UTF-16 text but is not valid UTF-16") from None
    return as_text(data.removeprefix(codecs.BOM_UTF8), what) if data.strip() else ""


def _pdf(data: bytes, what: str, password: str | None, limits: FileLimits) -> FileText:
    from .pdf import page_lines, page_text, pdf_pages, running_lines

    pages, read = [], 0
    for raw in pdf_pages(data, what, password):
        read += len(raw)
        if read > limits.max_chars:
            raise InputTooLongError(f"{what} holds over {limits.max_chars:,} characters of text (stopped at page "
                                    f"{len(pages) + 1}); split it")
        pages.append(page_lines(raw))
    running = running_lines(pages)
    texts = [page_text(lines, running) for lines in pages]
    if not any(has_visible_text(text) for text in texts):
        raise NoTextError(f"{what} has no text layer ({len(pages)} pages of images: a scan?); locsum does not do "
                          "OCR: give it a PDF with text (ocrmypdf adds one)")
    pieces, parts, offset = [], [], 0
    for number, text in enumerate(texts, 1):
        if not has_visible_text(text):
            continue
        pieces.append(text)
        parts.append(Part(what, offset, offset + len(text), page=number, last_page=number))
        offset += len(text) + 2
    return FileText(what, "pdf", "\n\n".join(pieces), _joined(parts))


def _joined(parts: list[Part]) -> list[Part]:
    """Parts shorter than MIN_PART_CHARS joined with the one after them (the last with the one before)."""
    out: list[Part] = []
    for part in parts:
        if out and out[-1].end - out[-1].start < MIN_PART_CHARS:
            first = out.pop()
            part = Part(part.file, first.start, part.end, first.page, part.last_page, first.heading or part.heading)
        out.append(part)
    if len(out) > 1 and out[-1].end - out[-1].start < MIN_PART_CHARS:
        last = out.pop()
        first = out.pop()
        out.append(Part(last.file, first.start, last.end, first.page, last.last_page, first.heading))
    return out


def sections(text: str, what: str) -> list[Part]:
    """`text` cut before each Markdown heading line (`# ...` to `###### ...`), each section under its heading
    (the text before the first heading under none); short ones joined (`_joined`)."""
    parts: list[Part] = []
    start, heading, offset = 0, None, 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("#") and stripped.lstrip("#").startswith(" ") and len(stripped) - len(
                stripped.lstrip("#")) <= 6:
            if has_visible_text(text[start:offset]):
                parts.append(Part(what, start, offset, heading=heading))
            start, heading = offset, stripped.lstrip("#").strip()
        offset += len(line)
    if has_visible_text(text[start:]):
        parts.append(Part(what, start, len(text), heading=heading))
    return _joined(parts)
