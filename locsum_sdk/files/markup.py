"""HTML, Word and Markdown files as text with their headings kept as Markdown heading lines (`# Title`), which
`sections` cuts the text at: HTML's main text by trafilatura (not script, style, navigation or boilerplate), a
DOCX's paragraphs and tables by python-docx, Markdown's text by markdown-it-py (markup left out)."""

from __future__ import annotations

import io
import re
import zipfile

from ..errors import FileFormatError, FileTooLargeError

MAX_EXPANSION = 100  # a DOCX member may expand to at most this many times its compressed size
HEADING_STYLES = re.compile(r"^(Heading|Title)\s*(\d*)$", re.IGNORECASE)


def html_text(data: bytes, what: str) -> str:
    """The main text of an HTML page, headings as Markdown lines; the whole page's text where no main text is
    found (a page of links, say)."""
    import trafilatura

    try:
        page: str | bytes = data.decode("utf-8")
    except UnicodeDecodeError:
        page = data  # trafilatura finds its encoding
    try:
        text = trafilatura.extract(page, output_format="markdown", include_comments=False, include_tables=True,
                                   include_links=False, include_images=False, favor_recall=True, deduplicate=False)
        if not text:
            text = trafilatura.html2txt(page)
    except MemoryError:
        raise
    except Exception as err:  # lxml and trafilatura fail on broken markup each their own way
        raise FileFormatError(f"{what} is HTML that cannot be read ({type(err).__name__}: {err})") from None
    return _plain_markdown(text or "")


def _plain_markdown(text: str) -> str:
    """trafilatura's Markdown with emphasis marks left out (headings, list items and table rows kept)."""
    return re.sub(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", r"\2", text)


def docx_text(data: bytes, what: str, max_bytes: int) -> str:
    """A Word document's paragraphs and tables in order, headings (Heading n, Title styles) as Markdown lines,
    a table's rows as cells joined by ' | '. FileTooLargeError for an archive that would expand past `max_bytes`
    or past MAX_EXPANSION times a member's compressed size (a zip bomb), before anything is expanded."""
    import docx

    expanded_size(data, what, max_bytes)
    try:
        blocks = list(_docx_blocks(docx.Document(io.BytesIO(data))))
    except MemoryError:
        raise
    except Exception as err:  # a damaged archive fails in zipfile, zlib, lxml or python-docx, each its own way
        raise FileFormatError(f"{what} is a damaged Word document ({type(err).__name__}: {err})") from None
    return "\n".join(block for block in blocks if block)


def expanded_size(data: bytes, what: str, max_bytes: int) -> int:
    """The bytes a Word document's archive expands to, read from its directory (nothing is expanded);
    FileTooLargeError past `max_bytes` or MAX_EXPANSION times a member's compressed size (a zip bomb)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as err:
        raise FileFormatError(f"{what} is a damaged Word document ({err})") from None
    expanded = sum(member.file_size for member in members)
    if expanded > max_bytes or any(m.file_size > MAX_EXPANSION * max(m.compress_size, 1024) for m in members):
        raise FileTooLargeError(f"{what} expands to {expanded:,} bytes, over {max_bytes:,} or {MAX_EXPANSION} times "
                                "its compressed size (a zip bomb?); locsum does not read it")
    return expanded


def _docx_blocks(document):
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            text = block.text.strip()
            style = HEADING_STYLES.match(block.style.name if block.style is not None else "")
            if text and style:
                level = int(style.group(2) or 1)
                yield "#" * min(max(level, 1), 6) + " " + " ".join(text.split())
            else:
                yield text
        elif isinstance(block, Table):
            for row in block.rows:
                cells = [" ".join(cell.text.split()) for cell in row.cells]
                yield " | ".join(dict.fromkeys(c for c in cells if c))  # merged cells repeat their text


def markdown_text(text: str) -> str:
    """Markdown as plain text: headings kept as `#` lines, paragraphs and list items a line each, a table's rows
    as cells joined by ' | ', code kept; emphasis, link targets, images and HTML tags left out."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    lines: list[str] = []
    heading, row = "", None
    for token in tokens:
        if token.type == "heading_open":
            heading = "#" * int(token.tag[1:]) + " "
        elif token.type == "tr_open":
            row = []
        elif token.type == "tr_close" and row is not None:
            lines.append(" | ".join(cell for cell in row if cell))
            row = None
        elif token.type == "inline":
            content = " ".join("".join(" " if child.type in ("softbreak", "hardbreak") else child.content
                                       for child in token.children or () if child.type not in IGNORED).split())
            if row is not None:
                row.append(content)
            elif content:
                lines.append(heading + content)
            heading = ""
        elif token.type in ("fence", "code_block"):
            lines.append(token.content.rstrip("\n"))
    return "\n".join(line for line in lines if line.strip())


IGNORED = ("image", "html_inline")  # inline tokens whose content is not text a reader sees
