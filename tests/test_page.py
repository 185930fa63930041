"""The page `locsum serve` serves at `/`, in a real browser: headless Chromium (Debian's `chromium` package, or the
binary $LOCSUM_CHROMIUM names) driven by Playwright for Python. The shipped example meeting (its first 50 lines) is
summarized by the default bundle through the page; clicking a sentence marks exactly the passages the API gave for it;
a text carrying markup and script shows as text; files are read and shown under their names.

Playwright rather than Selenium: its locators wait for what they look for (the summary streams in, with no sleeps or
polling in the test), it hands the test the very response the page received (the highlights are checked against
that answer's sources), and its one package drives any Chromium binary by path, with no second driver package whose
version must follow the browser's."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from serving import served

from locsum_sdk import Summarizer

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "a-token-of-at-least-16-characters"
BROWSER = os.environ.get("LOCSUM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
WAIT_MS = 180_000  # the longest a summary may take to appear (the meeting takes seconds on 2 cores)

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no Chromium here (apt-get install chromium, or set "
                                "LOCSUM_CHROMIUM to a Chromium binary)")


def api_answer(server: str, request) -> dict:
    """The API's answer to the request the page sent, asked again without streaming (the page read the stream
    itself; decoding is deterministic, so the answer is the one the page showed)."""
    body = {**json.loads(request.post_data), "stream": False}
    answer = httpx.post(f"{server}v1/summarize", json=body, headers={"Authorization": f"Bearer {TOKEN}"},
                        timeout=WAIT_MS / 1000)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.fixture(scope="module")
def server():
    with served(Summarizer.from_pretrained(threads=2), memory_budget="4GB", token=TOKEN) as client:
        yield str(client.base_url).rstrip("/") + "/"


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        # --no-sandbox: Chromium's sandbox cannot start as root, which CI runs as
        launched = playwright.chromium.launch(executable_path=BROWSER, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.goto(server)
    opened.fill("#token", TOKEN)
    yield opened
    context.close()
    assert not errors, errors  # no script error on the page, whatever the input held


def summarize(page, server: str) -> dict:
    """Submit the form and wait for the summary; the API's answer to the request the page sent."""
    with page.expect_request("**/v1/summarize", timeout=WAIT_MS) as request:
        page.click("#submit")
    page.wait_for_selector("#summary[data-done='true']", timeout=WAIT_MS)
    answer = api_answer(server, request.value)
    shown = page.locator(".sentence").evaluate_all("spans => spans.map((span) => span.firstChild.textContent)")
    assert shown == [answer["summary"][s["start"]:s["end"]] for s in answer["sentences"]]
    status = page.locator("#status").inner_text()
    assert all(warning in status for warning in answer["warnings"])
    return answer


def check_passages(page, answer: dict, documents: list[str]) -> int:
    """Click each sentence with passages: the marked spans are its passages, the first scrolled into view. Returns
    how many sentences were checked."""
    checked = 0
    for index, sentence in enumerate(answer["sentences"]):
        if not sentence["passages"]:
            continue
        page.locator(".sentence").nth(index).click()
        assert page.locator(".sentence.chosen").get_attribute("data-sentence") == str(index)
        for rank, passage in enumerate(sentence["passages"]):
            marked = page.locator(f"mark.passage[data-passage='{rank}']").all_text_contents()
            assert "".join(marked) == documents[passage["document"]][passage["start"]:passage["end"]]
        first = page.locator("mark.passage[data-passage='0']").first.bounding_box()
        shown = page.locator("#documents").bounding_box()
        assert shown["y"] <= first["y"] and first["y"] + min(first["height"], 20) <= shown["y"] + shown["height"]
        assert page.locator("#passages li").count() >= len(sentence["passages"])
        checked += 1
    return checked


def test_the_meeting_is_summarized_and_a_sentence_shows_its_passages(page, server):
    lines = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    meeting = "".join(lines[:50])  # 8,600 characters: several of the default's pages, summarized twice here
    assert page.locator("#token-row").is_visible()  # the server asks for a token, and the page says so
    page.fill("#token", "")
    page.fill("#text", meeting)
    page.click("#submit")
    sync_api.expect(page.locator("#error")).to_contain_text("unauthorized", timeout=WAIT_MS)
    page.fill("#token", TOKEN)
    answer = summarize(page, server)
    assert page.locator("#error").is_hidden()
    assert answer["documents"] == [{"text": meeting}] and answer["sentences"]
    assert page.locator(".strip .unit-bar").count() == len(answer["units"])
    assert page.locator(".sentence.unsupported").count() == sum(not s["supported"] for s in answer["sentences"])
    assert check_passages(page, answer, [meeting]) >= 1
    page.locator(".sentence.chosen").click()  # a second click lets the sentence go
    assert page.locator("mark.passage").count() == 0


def test_the_answers_warnings_are_shown_and_right_to_left_text_runs_so(page, server):
    page.fill("#text", "ناقش الاجتماع ميزانية المشروع والجدول الزمني. " * 12)
    answer = summarize(page, server)
    assert answer["warnings"] and answer["warnings"][0].startswith("100% of the input's letters are Arabic script")
    direction = "element => getComputedStyle(element).direction"
    assert page.locator("#text").evaluate(direction) == page.locator(".document .body").evaluate(direction) == "rtl"


HOSTILE = ("<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"> <b>bold</b> &amp; "
           "\U0001F600 \U0001F3D7 ")


def test_markup_and_script_in_the_input_show_as_text(page, server):
    lines = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8").splitlines()[:24]
    text = "\n".join(HOSTILE + line if i % 3 == 0 else line for i, line in enumerate(lines))  # astral characters
    page.fill("#text", text)  # before the passages: their spans count code points, the page's strings UTF-16
    answer = summarize(page, server)
    assert page.evaluate("window.pwned") is None
    assert page.locator("script").count() == 1 and page.locator("img, #documents b, #summary b").count() == 0
    shown = page.locator("#documents").inner_text()
    assert "<script>window.pwned = 1</script>" in shown and "&amp;" in shown and "\U0001F3D7" in shown
    assert check_passages(page, answer, [text]) >= 1


def test_files_are_uploaded_and_shown_under_their_names(page, server, tmp_path):
    from document_files import write_docx

    lines = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8").splitlines()
    notes = write_docx("\n".join(lines[:20]), tmp_path / "notes.docx", heading_every=6)
    markdown = tmp_path / "survey.md"
    markdown.write_text("# Survey\n\n" + "\n\n".join(lines[52:64]) + "\n", encoding="utf-8")
    page.set_input_files("#files", [str(notes), str(markdown)])
    answer = summarize(page, server)
    documents = [document["text"] for document in answer["documents"]]
    files = {document["source"]["file"] for document in answer["documents"]}
    assert files == {"notes.docx", "survey.md"}
    headings = page.locator(".document h3").all_text_contents()
    assert len(headings) == len(documents) and all(heading.split(":")[0].split(",")[0] in files
                                                   for heading in headings)
    check_passages(page, answer, documents)
