"""The files people hold (`locsum_sdk.files`): the example meeting written by the tests as PDF, Word, HTML and
Markdown gives back its words in order; a PDF's parts are its pages, a marked-up file's its heading sections, and
every unit of a summary says where it came from; bad files are refused with typed errors, and damaged ones raise
nothing else."""

from __future__ import annotations

import difflib
import json
import math
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from document_files import (
    HEADER,
    paragraphs,
    write_docx,
    write_html,
    write_image_pdf,
    write_markdown,
    write_pdf,
    zip_bomb_docx,
)
from hypothesis import given
from hypothesis import strategies as st

from locsum_sdk.errors import (
    BackendUnavailableError,
    EmptyInputError,
    EncodingError,
    EncryptedFileError,
    FileFormatError,
    FileTooLargeError,
    LocsumError,
    NoTextError,
)
from locsum_sdk.files import FileLimits, read_file

pytest.importorskip("pypdfium2")
pytest.importorskip("fpdf")

MEETING = (Path(__file__).resolve().parents[1] / "examples" / "meeting.txt").read_text(encoding="utf-8")
WRITERS = {"pdf": (write_pdf, "meeting.pdf"), "docx": (write_docx, "meeting.docx"),
           "html": (write_html, "meeting.html"), "markdown": (write_markdown, "meeting.md")}


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9']+", text)


def recovered(original: str, extracted: str) -> tuple[float, int]:
    """The share of `original`'s words found in `extracted` in order, and the words `extracted` adds."""
    ours, theirs = words(original), words(extracted)
    matcher = difflib.SequenceMatcher(None, ours, theirs, autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    return matched / len(ours), len(theirs) - matched


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("files")
    return {kind: write(MEETING, root / name) for kind, (write, name) in WRITERS.items()}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_each_format_gives_back_the_meetings_words_in_order(files, kind):
    read = read_file(files[kind])
    assert read.format == kind
    share, added = recovered(MEETING, read.text)
    assert share >= 0.99, f"{kind}: {share:.4f} of the words recovered"
    headings = {"pdf": 0, "html": 7, "markdown": 10,  # a title of 3 words, two headings of 2 (and a link's text)
                "docx": 3 + 2 * math.ceil(len(paragraphs(MEETING)) / 10) + 5}  # a title, "Part n", the table
    assert added <= headings[kind], f"{kind}: {added} words not in the meeting (its headings: {headings[kind]})"
    for boilerplate in (HEADER, "Page 2", "Subscribe", "tracking", "Cookie", "Copyright", "https://", "*Good*"):
        assert boilerplate not in read.text, f"{kind} kept {boilerplate!r}"


def test_a_pdfs_parts_are_its_pages_with_hyphenation_joined(files):
    read = read_file(files["pdf"])
    pages = [(part.page, part.last_page) for part in read.parts]
    assert pages == [(n, n) for n in range(1, len(pages) + 1)] and len(pages) >= 5
    assert read.parts[0].start == 0 and read.parts[-1].end == len(read.text)
    assert "-\n" not in read.text and "\ufffe" not in read.text
    assert read.text.split() == MEETING.split()  # every word, hyphenated ones joined, headers and footers left out
    lines = read.text.split("\n")
    assert sum(line.startswith(("Chair:", "Marta:", "Daniel:")) for line in lines) >= 20  # paragraphs joined


@pytest.mark.parametrize("kind", ["docx", "html", "markdown"])
def test_a_marked_up_files_parts_are_its_heading_sections(files, kind):
    read = read_file(files[kind])
    headings = [part.heading for part in read.parts]
    assert len(read.parts) >= 2 and all(headings), headings
    assert headings[0] == "Quarterly planning meeting"  # the title alone joins the first section
    for part in read.parts:
        assert read.text[part.start:part.end].lstrip("# ").startswith(part.heading)
    assert [p.end for p in read.parts[:-1]] == [p.start for p in read.parts[1:]]
    if kind == "docx":
        assert "Roof | 46,000" in read.text


@pytest.mark.parametrize("encoding, head_end", [("utf-8", "</head><body>"), ("windows-1252", "")])
def test_a_page_whose_tags_are_never_closed_is_read_whole(tmp_path, caplog, encoding, head_end):
    """libxml2 stops at 256 levels, and `<font><p>` left open nests two deeper at each paragraph: the page's whole
    text instead, its sections kept, its script, style and head left out (a head left open too), with a warning."""
    sections = [f"<h2>Part {n}</h2>" + "".join(f"<font size=2><p>Paragraph {n}.{i}: the café's budget rose &amp; "
                                                 f"fell by {i}%." for i in range(150)) for n in range(3)]
    page = (f'<html><head><meta charset="{encoding}"><title>Old page</title><style>p {{ color: red }}</style>'
            f"{head_end}<h1>Report</h1>{''.join(sections)}<script>var hidden = 1;</script></body></html>")
    path = tmp_path / "old.html"
    path.write_bytes(page.encode(encoding))
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        read = read_file(path)
    assert "deeper than the HTML parser reads" in caplog.text
    assert read.text.count("Paragraph") == 450
    assert "Paragraph 2.149: the café's budget rose & fell by 149%." in read.text
    assert not any(hidden in read.text for hidden in ("hidden", "color", "Old page"))
    assert [part.heading for part in read.parts] == ["Report", "Part 1", "Part 2"]  # the title joins Part 0
    assert read.text.startswith("# Report\n## Part 0\nParagraph 0.0:")


def test_a_word_table_nested_in_a_cell_is_read_in_order(tmp_path):
    docx = pytest.importorskip("docx")

    document = docx.Document()
    document.add_paragraph("The form follows.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Item"
    cell = table.cell(0, 1)
    cell.text = "Costs:"
    inner = cell.add_table(rows=2, cols=2)
    for row, (name, cost) in enumerate((("Roof", "46,000"), ("Ramp", "12,500"))):
        inner.cell(row, 0).text, inner.cell(row, 1).text = name, cost
        inner.cell(row, 1).add_table(rows=1, cols=1).cell(0, 0).text = f"approved {row}"  # a third level
    cell.add_paragraph("Total 58,500.")
    document.add_paragraph("The end.")
    path = tmp_path / "form.docx"
    document.save(path)
    assert read_file(path).text.split("\n") == [
        "The form follows.", "Item | Costs: Roof | 46,000 approved 0 Ramp | 12,500 approved 1 Total 58,500.",
        "The end."]


def test_a_word_tables_merged_cells_count_once_and_equal_cells_each(tmp_path):
    docx = pytest.importorskip("docx")

    document = docx.Document()
    table = document.add_table(rows=3, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Budget"  # across two columns
    table.cell(0, 2).text = "Total"
    for column, value in enumerate(("Roof", "10", "10")):
        table.cell(1, column).text = value
    table.cell(1, 0).merge(table.cell(2, 0))  # down two rows: the second row's cell continues it
    table.cell(2, 1).text, table.cell(2, 2).text = "5", "5"
    path = tmp_path / "merged.docx"
    document.save(path)
    assert read_file(path).text.split("\n") == ["Budget | Total", "Roof | 10 | 10", "5 | 5"]


def test_word_text_in_content_controls_and_text_boxes_is_read_once_in_order(tmp_path):
    docx = pytest.importorskip("docx")
    from docx.oxml import parse_xml

    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    mc = 'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"'
    box = '<w:txbxContent><w:p><w:r><w:t>Box: the ramp costs more.</w:t></w:r></w:p></w:txbxContent>'
    document = docx.Document()
    document.add_paragraph("Before the controls.")
    body = document.element.body
    body.insert(len(body) - 1, parse_xml(  # a block content control, as a template's cover page or form field
        f'<w:sdt {w}><w:sdtPr/><w:sdtContent><w:p><w:r><w:t>In a control: the roof budget.</w:t></w:r></w:p>'
        '</w:sdtContent></w:sdt>'))
    body.insert(len(body) - 1, parse_xml(  # an inline control, a tab, a break and a text box with its fallback copy
        f'<w:p {w} {mc}><w:r><w:t xml:space="preserve">Signed by </w:t></w:r><w:sdt><w:sdtContent><w:r><w:t>Ann Lee'
        '</w:t></w:r></w:sdtContent></w:sdt><w:r><w:tab/><w:t>on Monday</w:t><w:br/><w:t>in Oslo.</w:t></w:r>'
        f'<w:r><mc:AlternateContent><mc:Choice Requires="wps">{box}</mc:Choice><mc:Fallback>{box}</mc:Fallback>'
        '</mc:AlternateContent></w:r><w:del><w:r><w:delText>Struck out.</w:delText></w:r></w:del></w:p>'))
    table = document.add_table(rows=1, cols=1)
    row = table.rows[0]._tr
    row.append(parse_xml(f'<w:sdt {w}><w:sdtContent><w:tc><w:p><w:r><w:t>A cell in a control</w:t></w:r></w:p>'
                         '</w:tc></w:sdtContent></w:sdt>'))
    table.cell(0, 0).text = "First cell"
    document.add_paragraph("After the controls.")
    path = tmp_path / "template.docx"
    document.save(path)
    assert read_file(path).text.split("\n") == [
        "Before the controls.", "In a control: the roof budget.", "Signed by Ann Lee\ton Monday", "in Oslo.",
        "Box: the ramp costs more.", "First cell | A cell in a control", "After the controls."]


def test_word_footnotes_and_endnotes_are_marked_where_referred_to_and_listed_after_the_body(tmp_path):
    docx = pytest.importorskip("docx")
    from docx.opc.constants import CONTENT_TYPE as CT
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part
    from docx.oxml import parse_xml

    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'

    def notes(tag: str, items: dict[int, str]) -> bytes:
        separator = f'<w:{tag} w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:{tag}>'
        bodies = "".join(f'<w:{tag} w:id="{key}">{text}</w:{tag}>' for key, text in items.items())
        return f'<w:{tag}s {w}>{separator}{bodies}</w:{tag}s>'.encode()

    def paragraph(*texts: str) -> str:
        return "".join(f'<w:p><w:r><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> {text}</w:t></w:r></w:p>'
                       for text in texts)

    document = docx.Document()
    body = document.element.body
    body.insert(len(body) - 1, parse_xml(
        f'<w:p {w}><w:r><w:t>The roof costs 46,000.</w:t></w:r><w:r><w:footnoteReference w:id="2"/></w:r>'
        '<w:r><w:t xml:space="preserve"> The ramp is required.</w:t></w:r><w:r><w:footnoteReference w:id="1"/></w:r>'
        '<w:del><w:r><w:footnoteReference w:id="3"/></w:r></w:del><w:r><w:endnoteReference w:id="1"/></w:r></w:p>'))
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Survey"
    table.cell(0, 1)._tc.append(parse_xml(f'<w:p {w}><w:r><w:t>March</w:t></w:r><w:r><w:footnoteReference '
                                          'w:id="2"/></w:r></w:p>'))
    document.add_paragraph("The end.")
    footnotes = notes("footnote", {1: paragraph("Building code, part 4.", "Checked in May."),
                                   2: paragraph("Quote of 3 March."), 3: paragraph("A deleted note.")})
    endnotes = notes("endnote", {1: paragraph("Minutes taken by Ann.")})
    for name, content, reltype, blob in (("footnotes", CT.WML_FOOTNOTES, RT.FOOTNOTES, footnotes),
                                         ("endnotes", CT.WML_ENDNOTES, RT.ENDNOTES, endnotes)):
        part = Part(PackURI(f"/word/{name}.xml"), content, blob, document.part.package)
        document.part.relate_to(part, reltype)
    path = tmp_path / "notes.docx"
    document.save(path)
    assert read_file(path).text.split("\n") == [
        "The roof costs 46,000.[1] The ramp is required.[2][i]", "Survey | March[1]", "The end.",
        "[1] Quote of 3 March.", "[2] Building code, part 4. Checked in May.", "[i] Minutes taken by Ann."]


def test_the_text_of_html_blocks_in_markdown_is_read_and_their_tags_are_not(tmp_path):
    path = tmp_path / "readme.md"
    path.write_text("# Plan\n\nIntro.\n\n<div align=\"center\">\nThe roof costs <b>46,000</b>.\n</div>\n\n<details>\n"
                    "<summary>Risks</summary>\n\nRain in March.\n\n</details>\n\n<!-- a note to editors -->\n\n"
                    "<script>track();</script>\n\nEnd.\n", encoding="utf-8")
    assert read_file(path).text.split("\n") == ["# Plan", "Intro.", "The roof costs 46,000.", "Risks",
                                                "Rain in March.", "End."]


def test_markdown_nested_deeper_than_its_parser_reads_is_read_as_it_is(tmp_path, caplog):
    outline = "".join("  " * level + f"- point {level}\n" for level in range(30))  # markdown-it's default: 9 levels
    path = tmp_path / "outline.md"
    path.write_text(outline, encoding="utf-8")
    assert read_file(path).text.split("\n") == [f"point {level}" for level in range(30)]
    quotes = "> " * 500 + "the quoted budget line\n\nAfter the quote.\n"
    path.write_text(quotes, encoding="utf-8")
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        read = read_file(path)
    assert "deeper than the Markdown parser reads" in caplog.text and str(path) in caplog.text
    assert "the quoted budget line" in read.text and "After the quote." in read.text


def test_the_type_is_read_from_the_content_not_the_name(files, tmp_path):
    for kind, name in (("pdf", "report.txt"), ("docx", "notes.bin"), ("html", "page.txt")):
        copy = tmp_path / name
        shutil.copyfile(files[kind], copy)
        assert read_file(copy).format == kind


def test_bad_files_are_refused_with_their_own_errors(files, tmp_path):
    locked = write_pdf(MEETING[:3000], tmp_path / "locked.pdf", password="s3cret")
    with pytest.raises(EncryptedFileError, match="encrypted PDF; give its password"):
        read_file(locked)
    with pytest.raises(EncryptedFileError, match="not its password"):
        read_file(locked, password="wrong")
    assert "Chair" in read_file(locked, password="s3cret").text
    with pytest.raises(NoTextError, match="no text layer .*OCR"):
        read_file(write_image_pdf(tmp_path / "scan.pdf"))
    with pytest.raises(FileTooLargeError, match="zip bomb"):
        read_file(zip_bomb_docx(tmp_path / "bomb.docx"))
    with pytest.raises(FileTooLargeError, match="over the 1,000 a file may have"):
        read_file(files["pdf"], limits=FileLimits(max_bytes=1000))
    signatures = {"image.png": (b"\x89PNG\r\n\x1a\n" + bytes(64), "PNG image"),
                  "old.doc": (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(64), "old Office document"),
                  "blob.dat": (b"\x01\x02\x00\x03" * 20, "binary data"),
                  "cut.pdf": (files["pdf"].read_bytes()[:300], "damaged or truncated PDF")}
    for name, (data, message) in signatures.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(FileFormatError, match=message):
            read_file(tmp_path / name)
    archive = tmp_path / "archive.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("notes.txt", "hello")
    with pytest.raises(FileFormatError, match="ZIP archive, not a Word document"):
        read_file(archive)
    (tmp_path / "empty.txt").write_bytes(b"  \n")
    with pytest.raises(EmptyInputError):
        read_file(tmp_path / "empty.txt")
    (tmp_path / "latin.txt").write_bytes("Caf\xe9 cr\xe8me".encode("latin-1"))
    with pytest.raises(EncodingError):
        read_file(tmp_path / "latin.txt")
    (tmp_path / "utf16.txt").write_bytes("Chair: good morning.".encode("utf-16"))
    assert read_file(tmp_path / "utf16.txt").text == "Chair: good morning."


def _damaged(data: bytes, how: str, position: float, noise: bytes) -> bytes:
    at = int(position * len(data))
    if how == "truncate":
        return data[:at]
    if how == "overwrite":
        return data[:at] + noise + data[at + len(noise):]
    if how == "header":
        return data[:8] + noise * 8
    return data[:at] + noise + data[at:]


@given(kind=st.sampled_from(sorted(WRITERS)), how=st.sampled_from(["truncate", "overwrite", "header", "insert"]),
       position=st.floats(0, 1), noise=st.binary(min_size=1, max_size=64))
def test_a_damaged_file_raises_a_typed_error_or_reads(files, tmp_path, kind, how, position, noise):
    path = tmp_path / f"damaged{Path(WRITERS[kind][1]).suffix}"
    path.write_bytes(_damaged(files[kind].read_bytes(), how, position, noise))
    try:
        read = read_file(path)
    except LocsumError:
        return
    assert read.parts and all(0 <= p.start < p.end <= len(read.text) for p in read.parts)


def test_broken_xml_inside_a_docx_is_a_typed_error(files, tmp_path):
    broken = tmp_path / "broken.docx"
    with zipfile.ZipFile(files["docx"]) as source, zipfile.ZipFile(broken, "w") as out:
        for item in source.infolist():
            data = source.read(item)
            out.writestr(item, data[: len(data) // 2] if item.filename == "word/document.xml" else data)
    with pytest.raises(FileFormatError, match="damaged Word document"):
        read_file(broken)


def test_a_missing_extra_names_its_install_command(files, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    with pytest.raises(BackendUnavailableError, match=r"locsum\[files\]"):
        read_file(files["pdf"])


def test_every_unit_of_a_summary_says_where_it_came_from(files, bundle_dir, capsys):
    from locsum_sdk import Summarizer
    from locsum_sdk.cli import main

    summarizer = Summarizer.from_pretrained(bundle_dir, threads=1)
    read = read_file(files["pdf"])
    summary = summarizer.summarize_file(files["pdf"], max_length=6, num_beams=1)
    assert summary.sources == read.parts
    for unit in summary.units:
        source = summary.unit_source(unit)
        assert source["file"] == str(files["pdf"]) and source["page"] >= 1
        assert read.text[source["start"]:source["end"]] == unit.text
    assert main(["summarize", str(files["pdf"]), str(files["markdown"]), "--bundle", str(bundle_dir), "--json",
                 "--max-length", "6", "--num-beams", "1"]) == 0
    units = json.loads(capsys.readouterr().out)["units"]
    assert {"page"} <= set(units[0]["source"]) and any("heading" in u["source"] for u in units)
    locked = write_pdf(MEETING[:2000], files["pdf"].with_name("locked.pdf"), password="pw")
    assert main(["summarize", str(locked), "--bundle", str(bundle_dir)]) == 2
    assert "encrypted PDF" in capsys.readouterr().err
    assert main(["summarize", str(locked), "--password", "pw", "--bundle", str(bundle_dir), "--max-length", "6"]) == 0


def test_a_corpus_line_names_its_files(files, bundle_dir):
    from locsum_sdk import Summarizer
    from locsum_sdk.batch import run_job

    folder = files["pdf"].parent
    write_pdf(MEETING[:2000], folder / "secret.pdf", password="pw")
    rows = [{"id": "pdf", "file": "meeting.pdf"}, {"id": "two", "file": ["meeting.md", str(files["html"])]},
            {"id": "gone", "file": "absent.pdf"}, {"id": "locked", "file": "secret.pdf", "query": "Who spoke?"},
            {"id": "bad", "file": 3}]
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    report = run_job(Summarizer.from_pretrained(bundle_dir, threads=1), corpus, folder / "out.jsonl",
                     overrides={"max_length": 6, "num_beams": 1}, progress=False)
    out = {row["id"]: row for row in map(json.loads, (folder / "out.jsonl").read_text().splitlines())}
    assert (report.summarized, report.failed) == (2, 3)
    assert out["pdf"]["summary"] and out["two"]["summary"]
    assert all(set(s) == {"start", "end", "supported", "passages"} for s in out["pdf"]["sentences"])
    gone = out["gone"]["error"]
    assert gone["type"] == "InputError" and "absent.pdf: no such file" in gone["message"]
    assert out["locked"]["error"]["type"] == "EncryptedFileError"
    assert out["bad"]["error"]["type"] == "DataError"


def test_reading_counts_toward_the_memory_limit(files, bundle_dir):
    from locsum_sdk import Summarizer
    from locsum_sdk.errors import MemoryLimitError
    from locsum_sdk.files import READING_BYTES

    size = files["pdf"].stat().st_size
    with pytest.raises(MemoryLimitError, match=r"reading .*meeting.pdf \(pdf"):
        read_file(files["pdf"], limits=FileLimits(memory=READING_BYTES["pdf"] * size - 1))
    assert read_file(files["pdf"], limits=FileLimits(memory=READING_BYTES["pdf"] * size)).parts
    summarizer = Summarizer.from_pretrained(bundle_dir, threads=1)
    with pytest.raises(MemoryLimitError, match="split the file or raise memory_limit"):
        summarizer.summarize_file(files["html"], memory_limit=1000)


def test_where_the_units_agree_a_file_gives_the_texts_summary(tmp_path, bundle_dir):
    """The meeting as Markdown without headings is one document whose text is the meeting's: the same units and
    the same summary as from the text file; the same holds for each page of the PDF given as a document."""
    from locsum_sdk import Summarizer

    summarizer = Summarizer.from_pretrained(bundle_dir, threads=1)
    options = {"max_length": 12, "num_beams": 2}
    plain = tmp_path / "plain.md"
    plain.write_text("\n\n".join(paragraphs(MEETING)) + "\n", encoding="utf-8")
    text, from_file = summarizer.summarize(MEETING.strip(), **options), summarizer.summarize_file(plain, **options)
    assert read_file(plain).text == MEETING.strip()
    spans = lambda summary: [(u.start, u.end) for u in summary.units]  # noqa: E731
    assert (from_file.text, spans(from_file)) == (text.text, spans(text))
    pdf = write_pdf(MEETING, tmp_path / "meeting.pdf")
    pages = summarizer.summarize(read_file(pdf).documents(), **options)
    assert summarizer.summarize_file(pdf, **options).text == pages.text
