"""`locsum serve` over real HTTP on loopback: answers equal the SDK's, every error has its status and code, streams
end in the non-streamed summary, memory is admitted against the budget and released on disconnect, deadlines,
tokens, SIGTERM, and no 500 or traceback for any JSON body."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from conftest import SLOW_OPTIONS, document, free_port, json_values
from hypothesis import event, given, settings
from hypothesis import strategies as st
from serving import served

from locsum_sdk import Summarizer
from locsum_sdk.serve import ServeOptions, create_app

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "a-token-of-at-least-16-characters"


class Gated(Summarizer):
    """The tiny summarizer, but each summarize_batch waits for `gate` (then runs), recording its batch sizes."""

    def __init__(self, real: Summarizer):
        self.__dict__.update(real.__dict__)
        self.gate, self.batches = threading.Event(), []

    def summarize_batch(self, inputs, queries=None, options=None, on_step=None, **overrides):
        self.batches.append(len(inputs))
        self.gate.wait(timeout=60)
        return super().summarize_batch(inputs, queries, options, on_step, **overrides)


@pytest.fixture(scope="module")
def summarizer(bundle_dir):
    return Summarizer.from_pretrained(bundle_dir, threads=1)


@pytest.fixture(scope="module")
def client(summarizer):
    with served(summarizer, memory_budget="2GB", max_body="64KB") as client:
        yield client


TEXT = document(random.Random(7), 12)
OPTIONS = {"max_length": 10, "num_beams": 2, "page_tokens": 32}
SLOW = {"text": document(random.Random(9), 300), "options": SLOW_OPTIONS}  # about 100 pages


def metric(client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


def test_a_summary_equals_the_sdks_with_units_and_timings(client, summarizer):
    answer = client.post("/v1/summarize", json={"text": TEXT, "query": "What was decided?", "options": OPTIONS})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    expected = summarizer.summarize(TEXT, query="What was decided?", **OPTIONS)
    assert body["summary"] == expected.text and body["tokens"] == len(expected.token_ids)
    assert [(u["start"], u["end"]) for u in body["units"]] == [(u.start, u.end) for u in expected.units]
    assert abs(sum(u["weight"] for u in body["units"]) - 1) < 1e-3
    assert {"paging", "encode", "decode", "queue", "request"} <= set(body["timings"])
    assert body["warnings"] == expected.warnings == []
    cut = client.post("/v1/summarize", json={"text": TEXT, "options": {**OPTIONS, "truncate": True, "max_tokens": 40}})
    assert cut.status_code == 200 and cut.json()["warnings"][0].startswith("truncated to fit max_tokens=40: kept ")
    cluster = client.post("/v1/summarize", json={"documents": [TEXT[:300], TEXT[300:]], "options": OPTIONS})
    assert cluster.status_code == 200 and {u["document"] for u in cluster.json()["units"]} == {0, 1}
    assert client.get("/healthz").json() == {"status": "ok"} and client.get("/readyz").json()["status"] == "ready"
    assert "/v1/summarize" in client.get("/openapi.json").json()["paths"] and client.get("/docs").status_code == 200


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"text": " \n\t"}, 400, "empty_input"),
    ({"text": "\u200b\u200b"}, 400, "empty_input"),
    (b'{"text": "a\\ud800b"}', 400, "invalid_encoding"),  # a lone surrogate, escaped in valid JSON
    (b'{"text": "caf\xe9"}', 400, "invalid_json"),
    (b"{not json", 400, "invalid_json"),
    ({"text": "x", "documents": ["y"]}, 422, "invalid_request"),
    ({}, 422, "invalid_request"),
    ({"text": 5}, 422, "invalid_request"),
    ({"text": "x", "colour": "red"}, 422, "invalid_request"),
    ({"text": "x", "stream": "yes"}, 422, "invalid_request"),
    ({"text": "x", "timeout": -1}, 422, "invalid_request"),
    ({"text": "x", "options": {"beams": 2}}, 422, "invalid_option"),
    ({"text": "x", "options": {"num_beams": 0}}, 422, "invalid_option"),
    (b'{"text": "x", "options": {"length_penalty": NaN}}', 400, "invalid_json"),  # NaN is not JSON
    ({"text": "x", "options": {"max_length": {"a": [1]}}}, 422, "invalid_option"),
    ({"text": "word " * 400, "options": {"max_tokens": 50}}, 413, "input_too_long"),
    ({"text": "word " * 20000}, 413, "body_too_large"),
    ({"text": "The board met.", "options": {"self": 1}}, 422, "invalid_option"),
    ({"text": "The board met.", "options": {"options": {}}}, 422, "invalid_option"),
    ('{"text": "The board met."}'.encode("utf-16"), 400, "invalid_json"),  # with a byte order mark
    ('{"text": "The board met."}'.encode("utf-16-le"), 400, "invalid_json"),
    ('{"text": "The board met."}'.encode("utf-32"), 400, "invalid_json"),
    ('{"text": "The board met."}'.encode("utf-32-be"), 400, "invalid_json"),
    (b'\xef\xbb\xbf{"text": "The board met."}', 400, "invalid_json"),  # a UTF-8 byte order mark
    (b'{"text": "The board met.", "timeout": Infinity}', 400, "invalid_json"),
    (b'{"text": "The board met.", "timeout": NaN}', 400, "invalid_json"),
    (b'{"text": "a \xed\xa0\x80 b"}', 400, "invalid_json"),  # a surrogate encoded in UTF-8 bytes
    (b'{"text": "x", "query": "\xed\xb0\x80"}', 400, "invalid_json"),
    (b'{"text": "x", "timeout": ' + b"9" * 5000 + b"}", 400, "invalid_json"),  # past Python's digit limit
    (b"[" * 30_000 + b"]" * 30_000, 400, "invalid_json"),  # past the recursion limit, within the body limit
])
def test_every_error_has_its_status_and_code(client, body, status, code):
    answer = (client.post("/v1/summarize", content=body) if isinstance(body, bytes)
              else client.post("/v1/summarize", json=body))
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and error["message"] and "Traceback" not in answer.text


def test_files_are_read_and_each_unit_says_where_it_came_from(client, summarizer, tmp_path):
    import base64

    from document_files import write_docx, write_pdf

    from locsum_sdk.files import read_file

    text = "\n".join(document(random.Random(3), 4) for _ in range(6))
    pdf, docx = write_pdf(text, tmp_path / "report.pdf"), write_docx(text, tmp_path / "notes.docx", heading_every=2)
    encoded = lambda path: base64.b64encode(path.read_bytes()).decode()  # noqa: E731
    answer = client.post("/v1/summarize", json={"files": [{"name": "report.pdf", "data": encoded(pdf)}],
                                                "options": OPTIONS})
    assert answer.status_code == 200, answer.text
    expected = summarizer.summarize_file(pdf, **OPTIONS)
    assert answer.json()["summary"] == expected.text
    sentences = answer.json()["sentences"]
    assert [(s["start"], s["end"], s["supported"]) for s in sentences] == [
        (s.start, s.end, s.supported) for s in expected.sentences]
    assert all(p["source"]["file"] == "report.pdf" for s in sentences for p in s["passages"])
    read = read_file(pdf, name="report.pdf")
    for unit in answer.json()["units"]:
        source = unit["source"]
        assert source["file"] == "report.pdf" and source["page"] >= 1
        assert read.text[source["start"]:source["end"]] == read.documents()[unit["document"]][unit["start"]:unit["end"]]
    both = client.post("/v1/summarize", json={"files": [{"name": "report.pdf", "data": encoded(pdf)},
                                                        {"name": "notes.docx", "data": encoded(docx)}],
                                              "options": OPTIONS})
    assert both.status_code == 200 and any("heading" in u["source"] for u in both.json()["units"])
    locked = write_pdf(text, tmp_path / "locked.pdf", password="pw")
    for upload, status, code in (({"name": "locked.pdf", "data": encoded(locked)}, 422, "encrypted_file"),
                                 ({"name": "a.pdf", "data": "%%%"}, 422, "unreadable_file"),
                                 ({"name": "a.png", "data": base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()}, 422,
                                  "unreadable_file")):
        answer = client.post("/v1/summarize", json={"files": [upload], "options": OPTIONS})
        assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    unlocked = client.post("/v1/summarize", json={"files": [{"name": "locked.pdf", "data": encoded(locked),
                                                             "password": "pw"}], "options": OPTIONS})
    assert unlocked.status_code == 200, unlocked.text


def test_an_unknown_field_says_which_fields_a_request_has(client):
    answer = client.post("/v1/summarize", json={"txt": "The board met."})
    assert answer.status_code == 422 and "exactly one of text (a string), documents" in answer.json()["error"][
        "message"]


def test_a_deadline_passing_mid_decoding_leaves_no_unretrieved_exception_in_the_log(summarizer, caplog):
    import gc
    import logging

    with caplog.at_level(logging.ERROR, logger="asyncio"), served(summarizer, memory_budget="2GB",
                                                                   batch_window=0) as client:
        answer = client.post("/v1/summarize", json={**SLOW, "timeout": 0.5})
        assert answer.status_code == 504
        wait_for(lambda: metric(client, "locsum_memory_reserved_bytes") == 0)
        assert client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS}).status_code == 200
    gc.collect()  # an unretrieved exception is logged when its future is collected
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_unknown_paths_and_methods_answer_json(client):
    assert client.get("/v1/nothing").json()["error"]["code"] == "not_found"
    assert client.get("/v1/summarize").json()["error"]["code"] == "method_not_allowed"


def events(text: str) -> list[tuple[str, dict]]:
    found = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        found.append((lines["event"], json.loads(lines["data"])))
    return found


@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_stream_ends_in_the_non_streamed_summary(client, num_beams):
    options = {**OPTIONS, "num_beams": num_beams, "max_length": 14}
    plain = client.post("/v1/summarize", json={"text": TEXT, "options": options}).json()
    streamed = client.post("/v1/summarize", json={"text": TEXT, "options": options, "stream": True})
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    found = events(streamed.text)
    assert {name for name, _ in found[:-1]} <= {"partial", "sentence"} and found[-1][0] == "summary"
    assert found[-1][1]["summary"] == plain["summary"] and len(found) > 2
    assert found[0][0] == "partial"
    sentences = {}
    for name, data in found[:-1]:
        if name == "partial":
            text = data["text"]
        else:  # a sentence of the partial text sent just before it; one with the same index replaces it
            assert text[data["start"]:data["end"]] == data["text"] and data["index"] <= len(sentences)
            sentences = {i: s for i, s in sentences.items() if i < data["index"]}
            sentences[data["index"]] = data
    final = found[-1][1]["sentences"]
    if num_beams == 1:  # greedy: each partial extends the last, and its sentences are the summary's
        texts = [data["text"] for name, data in found[:-1] if name == "partial"]
        assert texts[-1] == plain["summary"]
        assert [{k: s[k] for k in final[0]} for _, s in sorted(sentences.items())] == final


def test_a_stream_sends_each_sentence_with_its_sources_once_complete(client, summarizer):
    """Greedy, with sentence ends: every sentence of the summary is sent once, with the summary's sources, before
    the summary."""
    options = {**OPTIONS, "num_beams": 1, "max_length": 40, "min_length": 30}
    text = ". ".join(TEXT.split(" ")[i:i + 6] and " ".join(TEXT.split(" ")[i:i + 6]) for i in range(0, 120, 6))
    plain = client.post("/v1/summarize", json={"text": text, "options": options}).json()
    found = events(client.post("/v1/summarize", json={"text": text, "options": options, "stream": True}).text)
    sent = [data for name, data in found if name == "sentence"]
    assert [s["index"] for s in sent] == list(range(len(plain["sentences"])))
    assert [{k: s[k] for k in plain["sentences"][0]} for s in sent] == plain["sentences"]
    assert [s["text"] for s in sent] == [plain["summary"][s["start"]:s["end"]] for s in plain["sentences"]]


def test_return_documents_gives_the_text_the_spans_index(client):
    documents = [TEXT[:300], TEXT[300:700]]
    answer = client.post("/v1/summarize", json={"documents": documents, "options": OPTIONS,
                                                "return_documents": True}).json()
    assert answer["documents"] == [{"text": text} for text in documents]
    for unit in answer["units"]:
        assert documents[unit["document"]][unit["start"]:unit["end"]].strip()
    assert "documents" not in client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS}).json()


def test_the_page_is_served_with_its_files_and_a_strict_policy(summarizer):
    with served(summarizer, memory_budget="2GB", token=TOKEN) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
        assert '<script src="page/page.js"' in page.text and "<script>" not in page.text
        for name, media in (("page.js", "text/javascript"), ("page.css", "text/css")):
            served_file = client.get(f"/page/{name}")
            assert served_file.status_code == 200 and served_file.headers["content-type"].startswith(media)
            assert served_file.headers["x-content-type-options"] == "nosniff"
        assert client.get("/page/index.html").status_code == 404
        assert client.get("/readyz").json()["auth"] == "bearer"  # the page asks for the token
        assert client.post("/v1/summarize", json={"text": TEXT}).status_code == 401  # the API still asks for it
        assert "/" not in client.get("/openapi.json").json()["paths"]
    with served(summarizer, memory_budget="2GB", page=False) as client:
        assert client.get("/").json()["error"]["code"] == "not_found"
        assert client.get("/readyz").json()["auth"] == "none"


def test_a_request_over_the_whole_budget_is_413_at_once_and_short_ones_are_served(summarizer):
    long_text = document(random.Random(3), 400)
    needed = summarizer.estimate(long_text, **OPTIONS).total
    with served(summarizer, memory_budget=needed - 1) as client:
        started = time.monotonic()
        answer = client.post("/v1/summarize", json={"text": long_text, "options": OPTIONS})
        assert answer.status_code == 413 and answer.json()["error"]["code"] == "over_budget"
        assert time.monotonic() - started < 5 and metric(client, "locsum_memory_reserved_bytes") == 0
        short = [client.post("/v1/summarize", json={"text": TEXT[:200 + i], "options": OPTIONS}) for i in range(5)]
        assert all(answer.status_code == 200 for answer in short)


def post_in_thread(client, body, results, key):
    def run():
        results[key] = client.post("/v1/summarize", json=body)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_for(condition, seconds: float = 20) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)


def test_the_default_budget_is_a_share_of_the_served_backends_free_memory(summarizer, monkeypatch):
    """Unset, the budget reads where the model's working memory lives (`Backend.free_memory`: a GPU's for the
    torch backend on CUDA), not this machine's memory alone."""
    monkeypatch.setattr(summarizer.backend, "free_memory", lambda: 10**9)
    with served(summarizer) as client:
        assert metric(client, "locsum_memory_budget_bytes") == 8 * 10**8
    assert ServeOptions(memory_budget="2GB").budget_bytes(lambda: 10**9) == 2 * 10**9


def test_requests_wait_for_memory_in_order_then_decode_together_and_a_full_queue_is_503(summarizer):
    gated = Gated(summarizer)
    with served(gated, memory_budget="2GB", max_queue=3, batch_window=0) as client:
        results, threads = {}, []
        threads.append(post_in_thread(client, {"text": TEXT, "options": OPTIONS}, results, "first"))
        wait_for(lambda: gated.batches == [1])  # running, holding the gate
        for i in range(3):
            threads.append(post_in_thread(client, {"text": TEXT[: 300 + i], "options": OPTIONS}, results, i))
        wait_for(lambda: metric(client, "locsum_queue_depth") == 3)
        full = client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS})
        assert full.status_code == 503 and full.headers["retry-after"] == "1"
        assert full.json()["error"]["code"] == "queue_full"
        assert metric(client, "locsum_memory_reserved_bytes") > 0
        gated.gate.set()
        for thread in threads:
            thread.join(timeout=60)
        assert len(results) == 4 and all(answer.status_code == 200 for answer in results.values())
        assert gated.batches == [1, 3]  # the three that waited together decoded together
        assert metric(client, "locsum_memory_reserved_bytes") == 0 and metric(client, "locsum_queue_depth") == 0


def test_a_deadline_is_504_and_releases_the_memory(summarizer):
    gated = Gated(summarizer)
    with served(gated, memory_budget="2GB", batch_window=0) as client:
        answer = client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS, "timeout": 0.3})
        assert answer.status_code == 504 and answer.json()["error"]["code"] == "deadline_exceeded"
        gated.gate.set()  # the batch runs on and stops at its first step: nobody wants it
        wait_for(lambda: metric(client, "locsum_memory_reserved_bytes") == 0)
        assert client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS}).status_code == 200


def test_a_client_that_leaves_mid_stream_stops_its_decoding_and_frees_its_memory(summarizer):
    with served(summarizer, memory_budget="2GB", batch_window=0) as client:
        before = metric(client, "locsum_tokens_generated_total")
        with client.stream("POST", "/v1/summarize", json={**SLOW, "stream": True}) as answer:
            lines = answer.iter_lines()
            assert next(lines) == "event: partial"
            assert metric(client, "locsum_memory_reserved_bytes") > 0
        wait_for(lambda: metric(client, "locsum_memory_reserved_bytes") == 0)
        assert metric(client, "locsum_tokens_generated_total") == before  # it never finished its 500 steps
        assert client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS}).status_code == 200
        wait_for(lambda: 'locsum_requests_total{code="client_closed",status="499"} 1.0' in client.get("/metrics").text)


def test_a_client_that_leaves_before_its_answer_stops_its_decoding_too(summarizer):
    with served(summarizer, memory_budget="2GB", batch_window=0) as client:
        before = metric(client, "locsum_tokens_generated_total")
        with pytest.raises(httpx.ReadTimeout):
            client.post("/v1/summarize", json=SLOW, timeout=0.3)  # then hangs up
        wait_for(lambda: metric(client, "locsum_memory_reserved_bytes") == 0)
        assert metric(client, "locsum_tokens_generated_total") == before
        # the handler counts the 499 once it has withdrawn the job, which is when the memory is released
        wait_for(lambda: 'locsum_requests_total{code="client_closed",status="499"} 1.0' in client.get("/metrics").text)


def test_a_token_is_asked_of_every_summarize_and_metrics_request(summarizer):
    with served(summarizer, token=TOKEN) as client:
        for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}, {"Authorization": TOKEN}):
            answer = client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS}, headers=headers)
            assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
            assert answer.json()["error"]["code"] == "unauthorized"
        assert client.get("/metrics").status_code == 401 and client.get("/healthz").status_code == 200
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS}, headers=good).status_code == 200
        assert client.get("/metrics", headers=good).status_code == 200


def test_serving_beyond_loopback_needs_a_token(bundle_dir, capsys, monkeypatch):
    from locsum_sdk.cli import main

    monkeypatch.delenv("LOCSUM_SERVE_TOKEN", raising=False)
    assert main(["serve", "--bundle", str(bundle_dir), "--host", "0.0.0.0"]) == 2
    assert "give a token" in capsys.readouterr().err


def test_a_checkpoint_is_served_on_the_torch_backend_as_the_sdk_summarizes_it(checkpoint_dir):
    app = create_app(str(checkpoint_dir), ServeOptions(), backend="torch", device="cpu", threads=1)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 30)
        text = document(random.Random(3), 12)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            answer = client.post("/v1/summarize", json={"text": text, "options": {"num_beams": 1, "max_length": 12}})
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    expected = Summarizer.from_pretrained(checkpoint_dir, backend="torch", threads=1).summarize(
        text, num_beams=1, max_length=12)
    assert answer.status_code == 200, answer.text
    assert answer.json()["summary"] == expected.text


def test_ray_replicas_refuse_a_backend_or_device_of_their_own(bundle_dir, capsys):
    from locsum_sdk.cli import main

    assert main(["serve", "--bundle", str(bundle_dir), "--engine", "ray", "--device", "cuda"]) == 2
    assert "options of --engine local" in capsys.readouterr().err


@contextmanager
def cli_server(bundle_dir, grace: float):
    """`locsum serve` in a process of its own, ready; yields the process and its base URL."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "locsum_sdk.cli", "serve", "--bundle", str(bundle_dir),
                               "--port", str(port), "--threads", "1", "--grace", str(grace)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(base), 60)
        yield server, base
    finally:
        if server.poll() is None:
            server.kill()


def sigterm_mid_request(server, base: str, request: dict):
    """Send `request`, SIGTERM the server once its memory is reserved; the answer (or the client's error) and the
    seconds from the signal to the answer."""
    results = {}
    with httpx.Client(base_url=base, timeout=60) as client:
        def run():
            try:
                results["answer"] = client.post("/v1/summarize", json=request)
            except httpx.HTTPError as err:
                results["answer"] = err

        thread = threading.Thread(target=run)
        thread.start()
        wait_for(lambda: _reserved(base) > 0)
        signalled = time.monotonic()
        server.send_signal(signal.SIGTERM)
        thread.join(timeout=60)
    return results["answer"], time.monotonic() - signalled


def test_sigterm_lets_the_request_in_flight_finish_and_exits_0(bundle_dir):
    with cli_server(bundle_dir, grace=20) as (server, base):
        answer, _ = sigterm_mid_request(server, base, SLOW)
        assert answer.status_code == 200 and answer.json()["tokens"] == 127
        assert server.wait(timeout=30) == 0
        assert "Traceback" not in server.stderr.read()
        assert f"on {base}/ (POST /v1/summarize" in server.stdout.readline()  # where it serves, once ready


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _reserved(base: str) -> float:
    for line in httpx.get(f"{base}/metrics").text.splitlines():
        if line.startswith("locsum_memory_reserved_bytes "):
            return float(line.split()[1])
    return 0.0


def serve_json():
    return json_values(text_size=30, leaves=8)


VALID_OPTIONS = {
    "num_beams": st.integers(1, 3), "max_length": st.integers(2, 12), "min_length": st.integers(0, 4),
    "length_penalty": st.floats(0.5, 2.0), "no_repeat_ngram_size": st.integers(0, 3),
    "page_tokens": st.integers(16, 64), "num_pages": st.none() | st.integers(1, 4),
    "policy": st.sampled_from(["spatial", "document", "discourse", "x"]), "max_tokens": st.integers(1, 10_000),
    "truncate": st.booleans(), "select": st.sampled_from(["first", "tfidf"]),
    "memory_limit": st.sampled_from(["1GB", "10KB", "2"]), "early_stopping": st.booleans(),
    "known_words": st.booleans(), "end_penalty": st.floats(0.0, 3.0),
    "whole_sentences": st.booleans(), "ngram_word_starts": st.booleans(), "nope": st.just(1)}


def mostly(valid, invalid):  # 4 in 5 valid
    return st.integers(0, 4).flatmap(lambda roll: valid if roll else invalid)


def hostile_bodies():
    texts = st.sampled_from([TEXT[:200], "The board met.", "", " ", "\x00\x01", "é" * 50, "\u202e\u200b", "a\n" * 40])
    options = st.lists(st.sampled_from(sorted(VALID_OPTIONS)), unique=True, max_size=3).flatmap(
        lambda names: st.fixed_dictionaries({name: mostly(VALID_OPTIONS[name], serve_json()) for name in names}))
    text = st.fixed_dictionaries({"text": mostly(texts, serve_json())})
    documents = st.fixed_dictionaries({"documents": mostly(st.lists(texts, min_size=1, max_size=3), serve_json())})
    given_input = mostly(text | documents, st.tuples(text, documents).map(lambda pair: {**pair[0], **pair[1]}) |
                         st.just({}))
    body = st.tuples(given_input, st.fixed_dictionaries({}, optional={
        "query": mostly(st.none() | st.text(max_size=20), serve_json()),
        "options": mostly(options, serve_json()),
        "stream": mostly(st.booleans(), serve_json()), "timeout": mostly(st.floats(1, 60), serve_json())})
    ).map(lambda parts: {**parts[0], **parts[1]})
    junk = st.dictionaries(st.text(max_size=6), serve_json(), max_size=1)  # fields the API does not have
    as_bytes = st.tuples(body, mostly(st.just({}), junk)).map(
        lambda parts: json.dumps({**parts[1], **parts[0]}).encode())
    return mostly(as_bytes, st.binary(max_size=60) | serve_json().map(lambda v: json.dumps(v).encode()))


@settings(max_examples=300)
@given(body=hostile_bodies())
def test_no_hostile_body_gets_a_500_or_a_traceback(client, body):
    answer = client.post("/v1/summarize", content=body, headers={"Content-Type": "application/json"})
    event(f"status {answer.status_code}")
    assert answer.status_code in (200, 400, 413, 422), (answer.status_code, answer.text, body)
    assert "Traceback" not in answer.text
    if answer.status_code != 200:
        error = answer.json()["error"]
        assert error["code"] and error["message"]
    elif answer.headers["content-type"].startswith("text/event-stream"):
        assert events(answer.text)[-1][0] in ("summary", "error")


def test_every_code_the_api_answers_is_listed_with_its_status():
    import re

    from locsum_sdk.serve import app

    source = Path(app.__file__).read_text(encoding="utf-8")
    used = {(int(status), code) for status, code in re.findall(r'ServeError\((\d+), "(\w+)"', source)}
    used |= {(status, code) for _, status, code in app.STATUS}
    assert used and all(app.CODES[code][0] == status for status, code in used), used


def test_the_docs_list_every_code_with_its_status_and_meaning():
    import re

    from locsum_sdk.serve.app import CODES

    table = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    rows = {code: (int(status), meaning) for status, code, meaning in
            re.findall(r"^\| (\d{3}) \| `(\w+)` \| (.+?) \|$", table, re.M)}
    assert rows == CODES


def test_sigterm_cancels_what_does_not_finish_within_the_grace_period(bundle_dir):
    slower = {"text": document(random.Random(9), 600), "options": {**SLOW_OPTIONS, "page_tokens": 16}}
    with cli_server(bundle_dir, grace=0.2) as (server, base):
        answer, seconds = sigterm_mid_request(server, base, slower)
        assert server.wait(timeout=30) == 0
        assert seconds < 10  # cancelled at a step, not run to its end
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "shutting_down"


def _resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists() or sys.platform != "linux" or not Path(
    "/lib/x86_64-linux-gnu/libc.so.6").exists() and not Path("/usr/lib/x86_64-linux-gnu/libc.so.6").exists(),
    reason="reads a glibc Linux process's resident set")
def test_large_refused_requests_leave_the_idle_server_where_it_was(bundle_dir):
    """Two clients at once each sending an input of 1 to 1.1 million words that is refused after paging (over
    max_tokens): the idle server's resident set afterwards is within 300 MB of where it was (Python's own object
    arenas keep some). It used to keep what their paging freed, glibc holding it in the heap of each thread that
    paged: 1.5 GB over the idle server after four such requests."""
    rng = random.Random(5)
    words = " ".join(document(rng, 40).split()[:500])
    with cli_server(bundle_dir, grace=1) as (server, base):
        with httpx.Client(base_url=base, timeout=120) as client:  # warm: every route and a summary
            assert client.post("/v1/summarize", json={"text": TEXT, "options": OPTIONS}).status_code == 200
        time.sleep(1)
        before = _resident_mb(server.pid)

        def send(k: int) -> None:
            body = {"text": " ".join([words] * (2000 + 200 * k)), "options": {"max_tokens": 10000}}
            with httpx.Client(base_url=base, timeout=300) as client:
                answer = client.post("/v1/summarize", json=body)
                assert answer.status_code == 413 and answer.json()["error"]["code"] == "input_too_long"

        threads = [threading.Thread(target=send, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(2)  # the last request's memory goes back in the paging thread, after its answer
        after = _resident_mb(server.pid)
    assert after - before <= 300, f"idle resident set {before:.0f} MB before, {after:.0f} MB after"
