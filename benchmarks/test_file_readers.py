"""The candidate readers of PDF and HTML side by side, in one run, on the example meeting (written by the test
suite's writers: a PDF with running headers, page numbers and hyphenated words; an HTML page with navigation,
scripts and a footer) and, where the machine has them, real files (a PDF manual from /usr/share/doc, rustdoc's HTML
pages): words of the meeting recovered in order and pages a second, each as a ratio to the reader locsum ships
(pypdfium2, trafilatura). A candidate that is not installed is skipped with its name. Writes
`benchmarks/results/file_readers.json`."""

from __future__ import annotations

import difflib
import glob
import importlib.util
import re
import sys
import time
from pathlib import Path

from benchmarks.common import write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test suite's file writers

MEETING = Path(__file__).resolve().parents[1] / "examples" / "meeting.txt"
REAL_PDFS = sorted(glob.glob("/usr/share/doc/*/*.pdf"))[:3]
REAL_HTML = sorted(glob.glob(str(Path.home() / ".rustup/toolchains/*/share/doc/rust/html/rustdoc/*.html")))[:20]


def pdfium(path: str) -> list[str]:
    import pypdfium2

    document = pypdfium2.PdfDocument(path)
    return [re.sub("\ufffe\\s*", "", page.get_textpage().get_text_range()) for page in document]


def pypdf(path: str) -> list[str]:
    from pypdf import PdfReader

    return [re.sub(r"-\n(?=[a-z])", "", page.extract_text()) for page in PdfReader(path).pages]


def pdfminer(path: str) -> list[str]:
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTTextContainer

    return [re.sub(r"-\n(?=[a-z])", "", "".join(e.get_text() for e in page if isinstance(e, LTTextContainer)))
            for page in extract_pages(path)]


def trafilatura(page: str) -> str:
    from locsum_sdk.files.markup import html_text

    return html_text(page.encode(), "page")


def selectolax(page: str) -> str:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(page)
    for tag in ("script", "style", "nav", "header", "footer", "aside", "noscript", "template"):
        for node in tree.css(tag):
            node.decompose()
    node = tree.css_first("main") or tree.css_first("article") or tree.body
    return node.text(separator="\n") if node else ""


def beautifulsoup(page: str) -> str:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page, "lxml")
    for tag in soup(["script", "style", "nav", "header", "footer", "aside", "noscript", "template"]):
        tag.decompose()
    node = soup.find("main") or soup.find("article") or soup.body
    return node.get_text("\n") if node else ""


PDF_READERS = {"pypdfium2": (pdfium, "pypdfium2"), "pypdf": (pypdf, "pypdf"), "pdfminer.six": (pdfminer, "pdfminer")}
HTML_READERS = {"trafilatura": (trafilatura, "trafilatura"), "selectolax": (selectolax, "selectolax"),
                "beautifulsoup4": (beautifulsoup, "bs4")}


def recovered(original: str, extracted: str) -> float:
    ours, theirs = (re.findall(r"[A-Za-z0-9']+", text) for text in (original, extracted))
    matcher = difflib.SequenceMatcher(None, ours, theirs, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()) / len(ours)


def timed(read, items) -> float:
    """Pages (a PDF's) or pages (HTML files) read a second."""
    started, count = time.perf_counter(), 0
    for item in items:
        result = read(item)
        count += len(result) if isinstance(result, list) else 1
    return count / (time.perf_counter() - started)


def test_readers_side_by_side(benchmark, tmp_path):
    from document_files import write_html, write_pdf

    text = MEETING.read_text(encoding="utf-8")
    pdf = str(write_pdf(text, tmp_path / "meeting.pdf"))
    page = write_html(text, tmp_path / "meeting.html").read_text(encoding="utf-8")
    real = [Path(p).read_text(encoding="utf-8", errors="replace") for p in REAL_HTML]
    rows = {}

    def run():
        for group, readers, sample, files in (("pdf", PDF_READERS, pdf, [pdf] + REAL_PDFS),
                                              ("html", HTML_READERS, page, [page] + real)):
            for name, (read, module) in readers.items():
                if importlib.util.find_spec(module) is None:
                    print(f"{name}: not installed, skipped")
                    continue
                out = read(sample)
                rows[f"{group}: {name}"] = {
                    "recovered": recovered(text, "\n".join(out) if isinstance(out, list) else out),
                    "per_second": timed(read, files)}

    benchmark.pedantic(run, rounds=1, iterations=1)
    shipped = {"pdf": rows.get("pdf: pypdfium2"), "html": rows.get("html: trafilatura")}
    print("\nreader                    words recovered   items a second (pages or HTML pages)   x the shipped one")
    for name, row in rows.items():
        base = shipped[name.split(":")[0]]
        ratio = row["per_second"] / base["per_second"]
        print(f"{name:24s} {row['recovered']:16.4f} {row['per_second']:20.0f} {ratio:22.2f}")
    write_result("file_readers", {"rows": rows, "real_pdfs": REAL_PDFS, "real_html": len(REAL_HTML)})
