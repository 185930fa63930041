"""A file's type from its content (magic bytes), not its name: PDF, DOCX (a ZIP holding `word/document.xml`),
HTML, Markdown (text whose name says so), plain UTF-8 text; the common types locsum does not read are named."""

from __future__ import annotations

import codecs
import io
import re
import zipfile

from ..errors import FileFormatError

FORMATS = ("pdf", "docx", "html", "markdown", "text")

#: Signatures of types that are not read, with the name a refusal gives them.
FOREIGN = (
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old Office document (.doc, .xls, .ppt): save it as .docx or PDF"),
    (b"{\\rtf", "an RTF document: save it as .docx or PDF"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"\x1f\x8b", "a gzip archive: unpack it first"),
    (b"BZh", "a bzip2 archive: unpack it first"),
    (b"\xfd7zXZ\x00", "an xz archive: unpack it first"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive: unpack it first"),
    (b"Rar!", "a RAR archive: unpack it first"),
    (b"\x7fELF", "an executable"),
    (b"MZ", "a Windows executable"),
    (b"GGUF", "a GGUF model file"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"OggS", "an Ogg audio or video file"),
    (b"ID3", "an MP3 audio file"),
    (b"fLaC", "a FLAC audio file"),
)
_HTML = re.compile(rb"\s*(<!--.*?-->\s*)*<(!doctype\s+html|html|head|body|meta|title)[\s>]", re.IGNORECASE | re.DOTALL)
MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdown", ".mkd")


def detect(head: bytes, name: str = "", data: bytes | None = None) -> str:
    """The format (one of FORMATS) of a file whose first bytes are `head` (4 KiB are enough; `data`, the whole
    file, is needed to look inside a ZIP archive), named `name` (only Markdown is told from text by its name).
    FileFormatError names the type of a file that is not read."""
    what = name or "the file"
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return _zip_format(data if data is not None else head, what)
    if head.startswith(b"{\\rtf") or not _is_text(head):
        kind = next((kind for signature, kind in FOREIGN if head.startswith(signature)), None)
        if kind is not None:
            raise FileFormatError(f"{what} is {kind}; locsum reads PDF, Word (.docx), HTML, Markdown and text files")
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "text"
    if b"\x00" in head:
        raise FileFormatError(f"{what} is binary data of a type locsum does not read; it reads PDF, Word (.docx), "
                              "HTML, Markdown and text files")
    text = head.removeprefix(codecs.BOM_UTF8)
    if _HTML.match(text[:1024]):
        return "html"
    if name.lower().endswith(MARKDOWN_SUFFIXES):
        return "markdown"
    return "text"


def _is_text(head: bytes) -> bool:
    """Whether `head` reads as the start of UTF-8 text (a character cut at its end allowed), with no NUL byte."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def _zip_format(data: bytes, what: str) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as err:
        raise FileFormatError(f"{what} is a damaged or truncated ZIP archive ({err})") from None
    if "word/document.xml" in names:
        return "docx"
    if "xl/workbook.xml" in names or "ppt/presentation.xml" in names:
        raise FileFormatError(f"{what} is an Excel or PowerPoint file; locsum reads Word (.docx) documents, PDF, HTML, "
                              "Markdown and text: save it as PDF")
    if "mimetype" in names or "META-INF/container.xml" in names:
        raise FileFormatError(f"{what} is an EPUB or OpenDocument file; save it as PDF or .docx")
    raise FileFormatError(f"{what} is a ZIP archive, not a Word document; unpack it and give its files")
