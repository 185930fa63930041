"""Files people hold, written by the tests from a text: a PDF (fpdf2; a running header and a page-number footer on
every page, words hyphenated at line ends), a Word document (python-docx; headings, a table), an HTML page (with
navigation, script, style and a footer around its main text) and Markdown."""

from __future__ import annotations

import html
import io
import zipfile
from pathlib import Path

HEADER = "Riverside Library - Quarterly Planning Meeting"


def paragraphs(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip()]


def write_pdf(text: str, path: Path, hyphenate: bool = True, password: str | None = None) -> Path:
    """`text`'s paragraphs as an A4 PDF, lines broken by width; a word of 8 letters or more that does not fit is
    hyphenated where its first half fits."""
    from fpdf import FPDF

    class Document(FPDF):
        def header(self):
            self.set_font("Helvetica", "I", 8)
            self.cell(0, 8, HEADER, align="C")
            self.ln(10)

        def footer(self):
            self.set_y(-15)
            self.set_font("Helvetica", "I", 8)
            self.cell(0, 10, f"Page {self.page_no()}", align="C")

    pdf = Document(format="A4")
    if password is not None:
        pdf.set_encryption(owner_password=password + "-owner", user_password=password)
    pdf.set_auto_page_break(True, margin=20)
    pdf.add_page()
    pdf.set_font("Helvetica", size=11)
    width = pdf.w - pdf.l_margin - pdf.r_margin

    def put(line: str) -> None:
        pdf.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")

    for paragraph in paragraphs(text):
        words, line = paragraph.split(), ""
        while words:
            word = words.pop(0)
            trial = f"{line} {word}".strip()
            if pdf.get_string_width(trial) <= width:
                line = trial
                continue
            head = word[: len(word) // 2] + "-"
            if hyphenate and len(word) >= 8 and word.isalpha() and pdf.get_string_width(f"{line} {head}") <= width:
                put(f"{line} {head}".strip())
                line = word[len(word) // 2:]
                continue
            put(line)
            line = word
        if line:
            put(line)
        pdf.ln(3)
    pdf.output(str(path))
    return path


def write_image_pdf(path: Path, pages: int = 2) -> Path:
    """A PDF of drawings only: no text layer, as a scan has none."""
    from fpdf import FPDF

    pdf = FPDF()
    for _ in range(pages):
        pdf.add_page()
        pdf.rect(20, 20, 100, 60, style="F")
        pdf.line(10, 150, 190, 250)
    pdf.output(str(path))
    return path


def write_docx(text: str, path: Path, heading_every: int = 10) -> Path:
    """`text`'s paragraphs as a Word document: a title, a Heading 1 before every `heading_every` paragraphs, and a
    table at the end."""
    import docx

    document = docx.Document()
    document.add_heading("Quarterly planning meeting", level=0)
    for index, paragraph in enumerate(paragraphs(text)):
        if index % heading_every == 0:
            document.add_heading(f"Part {index // heading_every + 1}", level=1)
        document.add_paragraph(paragraph)
    table = document.add_table(rows=2, cols=2)
    for (row, col), value in {(0, 0): "Item", (0, 1): "Cost", (1, 0): "Roof", (1, 1): "46,000"}.items():
        table.cell(row, col).text = value
    document.save(str(path))
    return path


def write_html(text: str, path: Path) -> Path:
    """`text`'s paragraphs in an article with two headings, inside a page of navigation, script, style, an aside
    and a footer, none of which is its text."""
    parts = paragraphs(text)
    half = len(parts) // 2
    body = lambda items: "\n".join(f"<p>{html.escape(p)}</p>" for p in items)  # noqa: E731
    path.write_text(f"""<!DOCTYPE html>
<html><head><title>Riverside meeting</title><style>p {{ color: #333 }}</style>
<script>var tracking = "a script is not text";</script></head>
<body><nav><ul><li><a href="/">Home</a></li><li><a href="/news">News</a></li><li><a href="/contact">Contact us</a></li>
</ul></nav><header><div class="banner">Subscribe to our newsletter</div></header>
<main><article><h1>Quarterly planning meeting</h1><h2>Part one</h2>
{body(parts[:half])}
<h2>Part two</h2>
{body(parts[half:])}
</article></main><aside>Related: other meetings. Cookie settings.</aside>
<footer>Copyright 2026 Riverside Council. All rights reserved.</footer><script>console.log("no")</script></body></html>
""", encoding="utf-8")
    return path


def write_markdown(text: str, path: Path) -> Path:
    """`text`'s paragraphs under a title and two `##` headings, with emphasis and a link in the first one."""
    parts = paragraphs(text)
    half = len(parts) // 2
    first = parts[0].replace("Good morning", "*Good* morning", 1) + " See [the agenda](https://example.org/agenda)."
    lines = ["# Quarterly planning meeting", "", "## Part one", "", first, "",
             *sum(([p, ""] for p in parts[1:half]), []), "## Part two", "", *sum(([p, ""] for p in parts[half:]), [])]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def zip_bomb_docx(path: Path, expanded: int = 20 * 2**20) -> Path:
    """A Word document whose document.xml expands to `expanded` bytes from a few KiB."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"<w:document>" + b" " * expanded + b"</w:document>")
    path.write_bytes(buffer.getvalue())
    return path
