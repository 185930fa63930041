"""HTML, Word and Markdown files as text with their headings kept as Markdown heading lines (`# Title`), which
`sections` cuts the text at: HTML's main text by trafilatura (not script, style, navigation or boilerplate), a
DOCX's paragraphs, tables, footnotes and endnotes from its XML (through python-docx), Markdown's text by
markdown-it-py (markup left out).

The HTML parser under trafilatura (libxml2's) stops reading elements nested deeper than 256 levels, and a page
whose tags are never closed (`<font><p>` for every paragraph, as old pages have it) nests one level deeper at each
one: all but its first hundred paragraphs would be lost without a word. Such a page is read as its whole text
instead, by Python's own streaming parser, which builds no tree (`flat_text`), with a warning.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
from html.parser import HTMLParser

from ..errors import FileFormatError, FileTooLargeError

logger = logging.getLogger("locsum_sdk")
MAX_EXPANSION = 100  # a DOCX member may expand to at most this many times its compressed size
HEADING_STYLES = re.compile(r"^(Heading|Title)\s*(\d*)$", re.IGNORECASE)
UNREAD = frozenset({"script", "style", "template", "noscript", "svg", "math"})  # no text of the page's (nor the head)
BLOCKS = frozenset({"address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt",
                    "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "nav", "ol", "p", "pre",
                    "section", "summary", "table", "td", "th", "tr", "ul"})  # a new line before and after
HEADINGS = {f"h{level}": level for level in range(1, 7)}
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
WRAPPERS = frozenset({W + "sdt", W + "sdtContent", W + "customXml"})  # blocks inside them are the document's
RUN_TEXT = {W + "t": "", W + "tab": "\t", W + "ptab": "\t", W + "br": "\n", W + "cr": "\n", W + "noBreakHyphen": "-"}
NOTE_REFERENCES = {W + "footnoteReference": "footnotes", W + "endnoteReference": "endnotes"}
MAX_NESTING = 100  # markdown-it's block nesting limit (its own default: 20, lists of 9 levels); it recurses a few
# frames a level, and 1,000 levels ran out of Python's stack


def html_text(data: bytes, what: str) -> str:
    """The main text of an HTML page, headings as Markdown lines; the whole page's text where no main text is
    found (a page of links, say), or where its elements nest too deep for the parser (see the module docstring)."""
    import trafilatura

    try:
        page: str | bytes = data.decode("utf-8")
    except UnicodeDecodeError:
        page = data  # trafilatura finds its encoding
    flat = too_deep(page, what)
    if flat is not None:
        logger.warning("%s nests its elements deeper than the HTML parser reads (tags left open?): reading all of "
                       "its text, boilerplate included", what)
        return flat_text(flat)
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


def too_deep(page: str | bytes, what: str) -> str | None:
    """The page as text where libxml2's HTML parser stops at its depth limit on it (in the encoding it found, for
    bytes), else None."""
    from lxml import etree, html

    parser = html.HTMLParser()
    try:
        tree = html.document_fromstring(page, parser=parser)
    except (etree.ParserError, ValueError):  # no element at all: trafilatura says what it makes of it
        return None
    if not any(error.type_name == "ERR_RESOURCE_LIMIT" for error in parser.error_log):
        return None
    if isinstance(page, str):
        return page
    encoding = tree.getroottree().docinfo.encoding or "utf-8"
    try:
        return page.decode(encoding, errors="replace")
    except LookupError:
        raise FileFormatError(f"{what} is HTML in an encoding Python does not know ({encoding})") from None


class _FlatText(HTMLParser):
    """The text of every element outside the head and `UNREAD` ones, a line per block, headings as Markdown lines.
    The head ends where HTML ends it: at its end tag, or where the body or a block of it starts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.line: list[str] = []
        self.unread = 0  # how deep inside unread elements the parser is
        self.in_head = False

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in UNREAD:
            self.unread += 1
        elif tag == "head":
            self.in_head = True
        elif tag == "body":
            self.in_head = False
        elif tag in BLOCKS or tag in HEADINGS:
            self.in_head = False
            self.end_line()
            if tag in HEADINGS:
                self.line.append("#" * HEADINGS[tag] + " ")

    def handle_startendtag(self, tag: str, attrs) -> None:
        if tag in BLOCKS:
            self.end_line()

    def handle_endtag(self, tag: str) -> None:
        if tag in UNREAD:
            self.unread = max(0, self.unread - 1)
        elif tag == "head":
            self.in_head = False
        elif tag in BLOCKS or tag in HEADINGS:
            self.end_line()

    def handle_data(self, data: str) -> None:
        if not self.unread and not self.in_head:
            self.line.append(data)

    def end_line(self) -> None:
        text = " ".join("".join(self.line).split())
        if text and text.strip("# "):
            self.lines.append(text)
        self.line = []


def flat_text(page: str) -> str:
    """All the text of an HTML page outside its head, scripts and styles, a line per block and headings as
    Markdown lines, read by a streaming parser: no depth limit, no boilerplate left out."""
    reader = _FlatText()
    reader.feed(page)
    reader.close()
    reader.end_line()
    return "\n".join(reader.lines)


def _plain_markdown(text: str) -> str:
    """trafilatura's Markdown with emphasis marks left out (headings, list items and table rows kept)."""
    return re.sub(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", r"\2", text)


def docx_text(data: bytes, what: str, max_bytes: int) -> str:
    """A Word document's paragraphs and tables in order, headings (Heading n, Title styles) as Markdown lines,
    a table's rows as cells joined by ' | ', then its footnotes and endnotes (`Notes`). FileTooLargeError for an
    archive that would expand past `max_bytes` or past MAX_EXPANSION times a member's compressed size (a zip bomb),
    before anything is expanded."""
    import docx

    expanded_size(data, what, max_bytes)
    try:
        document = docx.Document(io.BytesIO(data))
        notes = Notes(document)
        blocks = [*_docx_blocks(document, notes), *notes.lines()]
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


class Notes:
    """A Word document's footnotes and endnotes (python-docx does not read them): each is marked where the text
    refers to it, numbered in the order of reference as Word numbers them (footnotes [1], [2]...; endnotes [i],
    [ii]...), and listed after the body, a line each ("[1] the note's text"). A note the text never refers to (a
    separator, or one whose reference was deleted) is not listed."""

    def __init__(self, document):
        from docx.opc.constants import RELATIONSHIP_TYPE as RT
        from docx.oxml import parse_xml

        self.texts: dict[str, dict[str, str]] = {"footnotes": {}, "endnotes": {}}
        self.marked: list[tuple[str, str, str]] = []  # (kind, mark, text) in the order of reference
        self.seen: dict[tuple[str, str], str] = {}
        self.counts = {"footnotes": 0, "endnotes": 0}
        for rel in document.part.rels.values():
            kind = {RT.FOOTNOTES: "footnotes", RT.ENDNOTES: "endnotes"}.get(rel.reltype)
            if kind is None or rel.is_external:
                continue
            for note in parse_xml(rel.target_part.blob).iterchildren(W + kind[:-1]):
                lines = [_row_text(element, self) if what == "row" else _paragraph_text(element, self)
                         for element, what in _block_elements(note)]
                self.texts[kind][note.get(W + "id")] = " ".join(" ".join(lines).split())

    def mark(self, reference) -> str:
        """The mark of the note a footnoteReference or endnoteReference element refers to ("" for none)."""
        kind, key = NOTE_REFERENCES[reference.tag], reference.get(W + "id")
        if (kind, key) not in self.seen:
            text = self.texts[kind].get(key)
            if not text:
                return ""
            self.counts[kind] += 1
            count = self.counts[kind]
            self.seen[kind, key] = f"[{count if kind == 'footnotes' else _roman(count)}]"
            self.marked.append((kind, self.seen[kind, key], text))
        return self.seen[kind, key]

    def lines(self) -> list[str]:
        """The notes referred to, footnotes first, each "[mark] text"."""
        return [f"{mark} {text}" for kind in ("footnotes", "endnotes") for of, mark, text in self.marked if of == kind]


def _roman(number: int) -> str:
    """Lower-case Roman numerals, as Word numbers endnotes (1 -> i, 14 -> xiv)."""
    digits = ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"), (50, "l"), (40, "xl"),
              (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i"))
    out = []
    for value, letters in digits:
        times, number = divmod(number, value)
        out.append(letters * times)
    return "".join(out)


def _docx_blocks(document, notes: Notes | None = None):
    """The body's lines: a paragraph a line (a heading as a Markdown heading line), a table's rows a line each."""
    from docx.text.paragraph import Paragraph

    for element, kind in _block_elements(document.element.body):
        if kind == "row":
            yield _row_text(element, notes)
            continue
        text = _paragraph_text(element, notes).strip()
        style = Paragraph(element, document).style
        heading = HEADING_STYLES.match(style.name if style is not None else "")
        if text and heading:
            level = int(heading.group(2) or 1)
            yield "#" * min(max(level, 1), 6) + " " + " ".join(text.split())
        else:
            yield text


def _block_elements(container):
    """(element, "paragraph" or "row") for each paragraph and table row of a body or cell, in order, inside content
    controls and custom XML too (python-docx's `iter_inner_content` skips those: a template's form fields, a cover
    page or a table of contents). Word's own nesting limits the recursion (lxml refuses XML nested past 256)."""
    for child in container.iterchildren():
        if child.tag == W + "p":
            yield child, "paragraph"
        elif child.tag == W + "tbl":
            yield from ((row, "row") for row in _children(child, W + "tr"))
        elif child.tag in WRAPPERS:
            yield from _block_elements(child)


def _children(element, tag: str):
    """`element`'s children of `tag`, those inside content controls and custom XML included."""
    for child in element.iterchildren():
        if child.tag == tag:
            yield child
        elif child.tag in WRAPPERS:
            yield from _children(child, tag)


def _row_text(row, notes: Notes | None = None) -> str:
    """A table row's cells joined by ' | ', empty ones (a merged cell's continuation) left out; a table nested in a
    cell is read there, in order (python-docx's `cell.text` holds the cell's paragraphs alone)."""
    cells = []
    for cell in _children(row, W + "tc"):
        lines = [_row_text(inner, notes) if kind == "row" else _paragraph_text(inner, notes)
                 for inner, kind in _block_elements(cell)]
        cells.append(" ".join(" ".join(lines).split()))
    return " | ".join(cell for cell in cells if cell)


def _paragraph_text(paragraph, notes: Notes | None = None) -> str:
    """A paragraph's text as Word shows it: every run's, inside hyperlinks, fields and inline content controls too,
    breaks as new lines and tabs as tabs; a text box's paragraphs where it is anchored, a line each, once (its VML
    fallback copy left out); a footnote's or endnote's mark where it is referred to (`Notes`); deleted text and field
    codes left out."""
    parts = []
    for node in paragraph.iter(W + "p", *RUN_TEXT, *NOTE_REFERENCES):
        if node is paragraph or any(ancestor.tag in (FALLBACK, W + "del") for ancestor in node.iterancestors()):
            continue
        if node.tag in NOTE_REFERENCES:
            parts.append(notes.mark(node) if notes is not None else "")
        elif node.tag == W + "t":
            parts.append(node.text or "")
        else:
            parts.append(RUN_TEXT.get(node.tag, "\n"))  # a text box's paragraph starts a line
    return "".join(parts)


def markdown_text(text: str, what: str = "the Markdown") -> str:
    """Markdown as plain text: headings kept as `#` lines, paragraphs and list items a line each, a table's rows
    as cells joined by ' | ', code kept, the text of HTML blocks kept; emphasis, link targets, images and HTML tags
    left out. markdown-it stops
    reading blocks nested `MAX_NESTING` levels deep (49 levels of lists, 99 of quotes); a text that reaches it is
    read as it is, markup and all, with a warning, rather than lose what lies deeper."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable("table").parse(text)
    if max((token.level for token in tokens), default=0) >= MAX_NESTING - 2:
        logger.warning("%s nests its lists or quotes deeper than the Markdown parser reads: reading it as it is, "
                       "markup included", what)
        return text
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
        elif token.type == "html_block":  # its text, as an HTML page's (`flat_text`): the tags left out
            lines.append(flat_text(token.content))
    return "\n".join(line for line in lines if line.strip())


IGNORED = ("image", "html_inline")  # inline tokens whose content is not text a reader sees
