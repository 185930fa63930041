"""The HTTP API (FastAPI): POST /v1/summarize (JSON, or server-sent events with "stream": true), /healthz, /readyz,
/metrics, and the OpenAPI schema at /docs. Every error is JSON `{"error": {"code", "message"}}` with a stable code."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import functools
import hmac
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.exceptions import HTTPException

from ..errors import (
    BackendError,
    EmptyInputError,
    EncodingError,
    EncryptedFileError,
    FileFormatError,
    FileTooLargeError,
    InputError,
    InputTooLongError,
    MemoryLimitError,
    NoTextError,
    OptionError,
)
from ..files import FileText, Part, read_bytes
from ..generation import Partial
from ..memory import release_free_memory, size_text
from ..sources import Sentence
from ..summarizer import Summarizer, Summary
from ..units import split_sentences
from . import page
from .admission import Admission, Cancelled, Job, QueueFull, ShuttingDown
from .metrics import Metrics
from .options import ServeOptions

logger = logging.getLogger("locsum_sdk")

RETRY_AFTER = 1  # seconds a client told 503 waits before trying again
TRIM_BYTES = 1_000_000  # a request body this large is paged into enough memory to give back when it ends

CODES = {  # every error code the API answers with: (HTTP status, what it means); stable across versions
    "invalid_json": (400, "the body is not JSON in UTF-8 (UTF-16, UTF-32, a byte order mark, NaN and Infinity are "
                     "not), or nests too deeply"),
    "empty_input": (400, "the text or a document is empty or has no visible character"),
    "invalid_encoding": (400, "the text holds a lone surrogate (a broken escape)"),
    "invalid_input": (400, "the input cannot be summarized as given"),
    "unauthorized": (401, "the server asks for a bearer token and the request had none or another"),
    "not_found": (404, "no such path"),
    "method_not_allowed": (405, "the path takes another method"),
    "body_too_large": (413, "the body is over the server's --max-body"),
    "input_too_long": (413, "the input is over max_tokens (truncate=true keeps what fits)"),
    "memory_limit": (413, "the input needs more memory than the request's own memory_limit"),
    "over_budget": (413, "the request's memory estimate is over the server's whole budget"),
    "file_too_large": (413, "a file is over the server's file limit, or its archive expands past it (a zip bomb)"),
    "invalid_request": (422, "the body does not follow the request schema (see /docs)"),
    "unreadable_file": (422, "a file is of a type not read (named), damaged, or not base64"),
    "encrypted_file": (422, "a file is an encrypted PDF and its password was not given, or not its password"),
    "no_text": (422, "a file holds no text (a scanned PDF without a text layer: OCR is not done)"),
    "invalid_option": (422, "an option is unknown, of the wrong type or out of range"),
    "internal": (500, "the server failed; its log has the details"),
    "backend_error": (500, "the inference engine failed while running a graph"),
    "queue_full": (503, "too many requests are waiting for memory; retry after Retry-After seconds"),
    "shutting_down": (503, "the server is stopping or starting; retry after Retry-After seconds"),
    "not_ready": (503, "the server is starting or stopping (readyz)"),
    "deadline_exceeded": (504, "the request ran past its timeout, waiting or decoding"),
}

# (error class, HTTP status, code): the first class an error is an instance of decides
STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (FileTooLargeError, 413, "file_too_large"),
    (EncryptedFileError, 422, "encrypted_file"),
    (NoTextError, 422, "no_text"),
    (FileFormatError, 422, "unreadable_file"),
    (EmptyInputError, 400, "empty_input"),
    (EncodingError, 400, "invalid_encoding"),
    (MemoryLimitError, 413, "memory_limit"),
    (InputTooLongError, 413, "input_too_long"),
    (InputError, 400, "invalid_input"),
    (OptionError, 422, "invalid_option"),
    (QueueFull, 503, "queue_full"),
    (ShuttingDown, 503, "shutting_down"),
    (BackendError, 500, "backend_error"),
)


class ServeError(Exception):
    """An error answered with `status` and `code` (the server's own: body, budget, deadline, auth)."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.headers = status, code, headers or {}


class FileUpload(BaseModel):
    """A file sent in the request: its name and its bytes in base64."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(..., min_length=1, max_length=255, description="the file's name (it tells Markdown from text)")
    data: str = Field(..., description="the file's bytes, base64")
    password: str | None = Field(None, description="an encrypted PDF's password")


class SummarizeRequest(BaseModel):
    """A text, a list of documents or files, an optional query, and options with the SDK's names."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str | None = Field(None, description="one text; or give documents, or files")
    documents: list[str] | None = Field(None, description="a cluster of documents, summarized as one input")
    files: list[FileUpload] | None = Field(None, min_length=1, description="files summarized as one input: PDF, "
                                           "HTML, Word (.docx), Markdown or text, the type read from the content; a "
                                           "PDF's pages and a marked-up file's sections are its documents, and each "
                                           "unit of the answer says where it came from (source)")
    query: str | None = Field(None, description="a question for query-focused summarization")
    options: dict[str, Any] = Field(default_factory=dict, description="any option of Summarizer.summarize, by name "
                                    "(num_beams, max_length, page_tokens, max_tokens, truncate, ...)")
    stream: bool = Field(False, description="answer with server-sent events: `partial` as the summary is decided "
                         "(greedy: its tokens so far; beam search: the best finished hypothesis, else the leading "
                         "beam), `sentence` as each of its sentences is complete (its index, text, span in the "
                         "partial's text, support, passages and unit weights; the last one when decoding ends; a "
                         "later event with the same index replaces it, as when beam search's leading beam changes), "
                         "then `summary` (the full response, whose sentences are the last word) or `error`")
    return_documents: bool = Field(False, description="the answer also holds the input's documents (`documents`: "
                                   "each one's text, and for files its source), the text the spans index")
    timeout: float | None = Field(None, gt=0, description="seconds before the request is abandoned (504); at most "
                                  "the server's own")

    @model_validator(mode="after")
    def _one_input(self) -> SummarizeRequest:
        if sum(given is not None for given in (self.text, self.documents, self.files)) != 1:
            raise ValueError("give exactly one of text, documents or files")
        return self


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def classify(err: BaseException) -> tuple[int, str, str]:
    """(status, code, message) of an error; anything unexpected is a 500 that hides its details."""
    if isinstance(err, ServeError):
        return err.status, err.code, str(err)
    if isinstance(err, Cancelled):
        return 504, "deadline_exceeded", str(err)
    if isinstance(err, ValidationError):
        return 422, "invalid_request", _validation_message(err.errors())
    for cls, status, code in STATUS:
        if isinstance(err, cls):
            return status, code, str(err)
    return 500, "internal", "the server failed on this request; its log has the details"


def summary_body(summary: Summary, job: Job, arrived: float, documents: bool = False) -> dict[str, Any]:
    steps = summary.unit_weights.shape[0]
    weights = summary.unit_weights.mean(axis=0) if steps else [0.0] * len(summary.units)
    summary = dataclasses.replace(summary, sources=job.sources)
    units = []
    for unit, weight in zip(summary.units, weights):
        entry = {"document": unit.document, "start": unit.start, "end": unit.end, "weight": round(float(weight), 5)}
        if unit.score is not None and math.isfinite(unit.score):
            entry["score"] = round(unit.score, 5)
        source = summary.unit_source(unit)
        if source is not None:
            entry["source"] = source
        units.append(entry)
    now = time.monotonic()
    timings = {key: round(value, 4) for key, value in summary.timings.items()}
    timings["queue"] = round((job.started or now) - job.queued, 4)
    timings["request"] = round(now - arrived, 4)
    body = {"summary": summary.text, "kind": summary.kind, "tokens": len(summary.token_ids),
            "score": round(summary.score, 5) if math.isfinite(summary.score) else None, "units": units,
            "sentences": [sentence_body(sentence, job.sources) for sentence in summary.sentences],
            "timings": timings, "warnings": summary.warnings}
    if documents:
        body["documents"] = [{"text": text, **({"source": job.sources[index].to_dict()} if job.sources else {})}
                             for index, text in enumerate(job.documents)]
    return body


def sentence_body(sentence: Sentence, sources: Sequence[Part]) -> dict[str, Any]:
    """A sentence's span, whether it is supported and its passages (each in its document and, for files, with its
    source: file, page or heading, span in the file's text)."""
    passages = []
    for passage in sentence.passages:
        entry = passage.to_dict()
        if sources:
            entry["source"] = sources[passage.document].locate(passage.start, passage.end)
        passages.append(entry)
    return {"start": sentence.start, "end": sentence.end, "supported": sentence.supported, "passages": passages,
            "unit_weights": [round(weight, 5) for weight in sentence.unit_weights]}


def create_app(bundle: str | None = None, options: ServeOptions | None = None, *,
               summarizer: Summarizer | None = None, threads: int | None = None, backend: str = "auto",
               device: str = "auto") -> FastAPI:
    """The service as an ASGI app, to run with uvicorn (`locsum serve`) or mount in your own.

    Args:
        bundle: the bundle to load (a path or a shipped bundle's name; None: the default bundle).
        options: admission, batching, deadlines, body limit and token (`ServeOptions`).
        summarizer: a loaded `Summarizer` to serve instead of loading `bundle`.
        threads: intra-op threads of the loaded model (None: $LOCSUM_THREADS, else every usable CPU).
        backend: the backend of the loaded model, as in `Summarizer.from_pretrained` (a checkpoint directory with
            backend="torch" and device="cuda" serves from a GPU).
        device: where the loaded model runs ("auto", "cpu" or "cuda").
    """
    options = options or ServeOptions()
    if not isinstance(options, ServeOptions):
        raise OptionError(f"options is a {type(options).__name__}; pass a ServeOptions or None")
    if summarizer is None:
        summarizer = Summarizer.from_pretrained(bundle, backend=backend, threads=threads, device=device)
    budget, body_limit = options.budget_bytes(summarizer.backend.free_memory), options.body_bytes
    metrics = Metrics(budget)
    state: dict[str, Any] = {"closing": False, "admission": None}
    # requests are paged (and their estimates made) one at a time, in one thread: what paging holds is one input's,
    # within the largest body, not one per waiting request in every thread's allocator heap
    paging = ThreadPoolExecutor(1, thread_name_prefix="locsum-paging")

    def run_batch(batch: list[Job], on_step) -> list[Summary]:
        return summarizer.summarize_batch([job.documents for job in batch], [job.query for job in batch],
                                          batch[0].options, on_step=on_step)

    def admission() -> Admission:
        """The admission of this app's event loop, started at its first request (an ASGI host that runs no
        lifespan, such as a Ray Serve replica, works the same)."""
        if state["admission"] is None:
            state["admission"] = Admission(run_batch, budget, options.max_queue, options.max_batch,
                                           options.batch_window, options.concurrency, metrics.observe)
            state["admission"].start()
        return state["admission"]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        admission()
        try:
            yield
        finally:
            state["closing"] = True
            await admission().close()
            paging.shutdown(wait=False)

    app = FastAPI(title="locsum", version="1", lifespan=lifespan,
                  description=f"Long-input summarization with a {summarizer.kind.name} bundle.")

    def count(status: int, code: str, arrived: float | None) -> None:
        """A summarize request's answer in the metrics (its latency too, when it has one)."""
        metrics.requests.labels(str(status), code).inc()
        if arrived is not None:
            metrics.latency.observe(time.monotonic() - arrived)

    def respond(err: BaseException, request_started: float | None = None) -> JSONResponse:
        status, code, message = classify(err)
        headers = dict(getattr(err, "headers", {}) or {})
        if status == 503:
            headers.setdefault("Retry-After", str(RETRY_AFTER))
        if request_started is not None:
            count(status, code, request_started)
        return JSONResponse(error_body(code, message), status_code=status, headers=headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "http_error")
        return JSONResponse(error_body(code, str(err.detail)), status_code=err.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body("invalid_request", _validation_message(err.errors())), status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s", request.url.path)
        return respond(err)

    def authorize(request: Request) -> None:
        if options.token is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, credential = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(credential.encode(), options.token.encode()):
            raise ServeError(401, "unauthorized", "send the server's token as 'Authorization: Bearer TOKEN'",
                             {"WWW-Authenticate": "Bearer"})

    @app.get("/healthz", summary="The process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="The bundle is loaded and checked, and requests are taken")
    async def readyz() -> JSONResponse:
        if state["closing"]:
            return JSONResponse(error_body("not_ready", "shutting down"), status_code=503,
                                headers={"Retry-After": str(RETRY_AFTER)})
        return JSONResponse({"status": "ready", "kind": summarizer.kind.name, "memory_budget": budget,
                             "auth": "none" if options.token is None else "bearer"})

    if options.page:
        page.mount(app)

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus(request: Request) -> Response:
        try:
            authorize(request)
        except ServeError as err:
            return respond(err)
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/summarize", summary="Summarize a text or a cluster of documents",
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": SummarizeRequest.model_json_schema()}}}})
    async def summarize(request: Request) -> Response:
        arrived, size = time.monotonic(), 0
        try:
            authorize(request)
            value, size = await _read_json(request, body_limit)
            body = SummarizeRequest.model_validate(value)
            job = await _admit(body, arrived)
        except Exception as err:  # noqa: BLE001 - every failure becomes its status and code
            if classify(err)[1] == "internal":
                logger.exception("unexpected error before admission")
            return respond(err, arrived)
        finally:
            if size >= TRIM_BYTES:  # paged, admitted or refused: what its paging freed goes back to the system
                asyncio.get_running_loop().run_in_executor(paging, release_free_memory)
        if body.stream:
            return StreamingResponse(_events(job, arrived, body.return_documents), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-store"})
        try:
            summary = await _result(job, request)
        except TimeoutError:
            admission().withdraw(job)
            return respond(ServeError(504, "deadline_exceeded", "the request ran past its deadline"), arrived)
        except ConnectionAbortedError:  # the client left: nobody to answer; its batch stops at the next step
            admission().withdraw(job)
            count(499, "client_closed", None)
            return Response(status_code=499)
        except asyncio.CancelledError:  # the server stops and its grace period is over: answer, do not hang up
            admission().withdraw(job)
            return respond(ShuttingDown("the server stopped before this request finished; send it again"), arrived)
        except Exception as err:  # noqa: BLE001
            return respond(err, arrived)
        return JSONResponse(_finished(summary, job, arrived, body.return_documents))

    async def _admit(body: SummarizeRequest, arrived: float) -> Job:
        if state["closing"]:
            raise ShuttingDown("the server is shutting down; send the request to another replica or retry later")
        chosen = summarizer.options(**body.options)
        files = await asyncio.get_running_loop().run_in_executor(paging, functools.partial(_read_uploads, body.files))
        documents = ([body.text] if body.text is not None else body.documents if body.documents is not None
                     else [document for file in files for document in file.documents()])
        needed = (await asyncio.get_running_loop().run_in_executor(
            paging, functools.partial(summarizer.estimate, documents, body.query, chosen))).total
        if needed > budget:
            raise ServeError(413, "over_budget", f"this request needs about {size_text(needed)} of working memory, "
                             f"over the server's whole budget of {size_text(budget)}; send a shorter input, or lower "
                             "num_beams, max_length or max_tokens")
        timeout = min(body.timeout or options.timeout, options.timeout)
        job = Job(documents, body.query, chosen, needed, arrived + timeout, asyncio.get_running_loop().create_future(),
                  sources=[part for file in files for part in file.parts])
        admission().submit(job)
        return job

    def _finished(summary: Summary, job: Job, arrived: float, documents: bool) -> dict[str, Any]:
        """The answer's body, with the request counted in the metrics."""
        count(200, "ok", arrived)
        metrics.queue_time.observe((job.started or time.monotonic()) - job.queued)
        metrics.units.inc(len(summary.units))
        metrics.tokens.inc(len(summary.token_ids))
        return summary_body(summary, job, arrived, documents)

    def _error_event(err: BaseException) -> str:
        status, code, message = classify(err)
        count(status, code, None)
        return _event("error", error_body(code, message)["error"])

    async def _events(job: Job, arrived: float, documents: bool) -> AsyncIterator[str]:
        loop, updates = asyncio.get_running_loop(), asyncio.Queue()
        job.on_partial = lambda step, partial: loop.call_soon_threadsafe(updates.put_nowait, (step, partial))
        last, answered, sent = None, False, []
        try:
            while True:
                getter = asyncio.ensure_future(updates.get())
                done, _ = await asyncio.wait({getter, job.future}, timeout=max(job.deadline - time.monotonic(), 0),
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    step, partial = getter.result()
                    text = summarizer.partial_text(partial)
                    if (text, partial.finished) != last:
                        last = text, partial.finished
                        yield _event("partial", {"step": step, "text": text, "finished": partial.finished})
                        for event in _partial_sentences(partial, text, sent, job.sources):
                            yield event
                    continue
                getter.cancel()
                answered = True
                if not done:
                    admission().withdraw(job)
                    yield _error_event(ServeError(504, "deadline_exceeded", "the request ran past its deadline"))
                    return
                try:
                    summary = job.future.result()
                except Exception as err:  # noqa: BLE001
                    yield _error_event(err)
                    return
                complete = [summary.text[sentence.start:sentence.end] for sentence in summary.sentences]
                for event in _sentence_events(summary.text, complete, functools.partial(list, summary.sentences), sent,
                                              job.sources):
                    yield event  # the last sentence, complete once decoding ended (spans in the summary's text)
                yield _event("summary", _finished(summary, job, arrived, documents))
                return
        finally:  # finished, or the client left (the response is cancelled): the batch stops at its next step
            admission().withdraw(job)
            if not answered:
                count(499, "client_closed", None)

    def _partial_sentences(partial: Partial, text: str, sent: list[str], sources: Sequence[Part]) -> list[str]:
        """`sentence` events for the partial's complete sentences not sent as they are now; their sources are found
        only when one is complete or has changed."""
        spans = split_sentences(text)
        complete = [text[start:end] for start, end in (spans if partial.finished else spans[:-1])]
        return _sentence_events(text, complete, lambda: summarizer.partial_sentences(partial), sent, sources)

    def _sentence_events(text: str, complete: list[str], sentences: Callable[[], list[Sentence]], sent: list[str],
                         sources: Sequence[Part]) -> list[str]:
        """`sentence` events from the first of the `complete` sentences (their texts) that `sent` (the text of each
        sentence sent so far, updated) does not hold as it is now; `sentences()` gives them with their sources."""
        changed = next((index for index, piece in enumerate(complete)
                        if index >= len(sent) or sent[index] != piece), None)
        if changed is None:
            return []
        del sent[changed:]
        events = []
        for index, sentence in enumerate(sentences()[changed:len(complete)], start=changed):
            sent.append(text[sentence.start:sentence.end])
            events.append(_event("sentence", {"index": index, "text": sent[-1], **sentence_body(sentence, sources)}))
        return events

    return app


DISCONNECT_POLL = 0.25  # seconds between looks for a client that left while its summary is made


async def _result(job: Job, request: Request) -> Summary:
    """The job's summary; TimeoutError past its deadline, ConnectionAbortedError once its client has left."""
    while True:
        remaining = job.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        done, _ = await asyncio.wait({job.future}, timeout=min(remaining, DISCONNECT_POLL))
        if done:
            return job.future.result()
        if await request.is_disconnected():
            raise ConnectionAbortedError


def _read_uploads(uploads: list[FileUpload] | None) -> list[FileText]:
    """Each uploaded file read (`locsum_sdk.files.read_bytes`); nothing without files."""
    read = []
    for upload in uploads or ():
        try:
            data = base64.b64decode(upload.data, validate=True)
        except (binascii.Error, ValueError):
            raise FileFormatError(f"files: {upload.name}'s data is not base64") from None
        read.append(read_bytes(data, upload.name, upload.password))
    return read


async def _read_json(request: Request, limit: int) -> tuple[Any, int]:
    """The body's JSON value and its size in bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ServeError(413, "body_too_large", f"the body has {declared} bytes, over this server's {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ServeError(413, "body_too_large", f"the body is over this server's {limit} bytes")
        chunks.append(chunk)
    try:  # UTF-8 only: json.loads would take UTF-16 and UTF-32 bytes, and NaN and Infinity, which are not JSON
        return json.loads(b"".join(chunks).decode("utf-8"), parse_constant=_not_json), size
    except (UnicodeDecodeError, ValueError) as err:  # ValueError: JSON errors, integers past Python's digit limit
        raise ServeError(400, "invalid_json", f"the body is not JSON in UTF-8 ({err})") from None
    except RecursionError:
        raise ServeError(400, "invalid_json", "the body nests too deeply") from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


REQUEST_FIELDS = ("a request is a JSON object with exactly one of text (a string), documents (a list of strings) or "
                  "files (a list of {name, data: base64, password}), and optionally query, options, stream and "
                  "timeout")


def _validation_message(errors: Any) -> str:
    parts = []
    for error in errors[:5]:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    if any(error.get("type") in ("extra_forbidden", "model_type") for error in errors):
        parts.append(REQUEST_FIELDS)
    return "; ".join(parts) + "; see /docs for the request schema"


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


