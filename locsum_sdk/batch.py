"""`locsum batch`: summarize a JSON Lines corpus into a JSON Lines output, streaming, resumable exactly once.

Input: one JSON object per line; the documents (a string or a list of strings), the optional query and the
optional id are read from configurable fields (`documents`, `query`, `id` by default: the evaluation format). An
input without an id gets `line-N`. A line may name files instead of giving documents: `file`, a path or a list of
paths (relative ones from the input file's folder), read by `locsum_sdk.files.read_file` (PDF, HTML, Word,
Markdown, text) into the documents it makes (a PDF's pages, a marked-up file's sections); a file that cannot be
read is that line's error.

Output: one line per input, in input order: `{"id", "summary", "tokens", "sentences"}` (each sentence's span in
the summary, whether its passages support it and the passages: `[document, start, end]`, `locsum_sdk.sources`)
or, for an input that cannot be summarized (no visible text, over a limit, a line that is not JSON...),
`{"id", "error": {"type", "message"}}`; the job goes on.
Each line is written with one `write` of the whole line (O_APPEND) and flushed to disk every batch.

Resume: a sidecar `OUTPUT.job.json` records the bundle (sha256 of its manifest), the options and the field names.
`resume=True` refuses a job whose record differs, drops a trailing partial line (a job killed in mid-write),
checks that the last written id is the id of the same input line, and skips exactly the inputs already written.
Memory is bounded by one batch whatever the corpus size: nothing is kept from line to line. One job at a time
writes an output: it holds `OUTPUT.lock` for its whole run (see `job_lock`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DataError, InputError, LocsumError, OptionError
from .job_lock import output_lock

logger = logging.getLogger("locsum_sdk")

JOB_SUFFIX = ".job.json"


@dataclass(frozen=True)
class Fields:
    """Where an input line keeps its parts."""

    documents: str = "documents"
    query: str = "query"
    id: str = "id"


@dataclass
class Report:
    """What a job did: inputs summarized and failed (by error type), skipped on resume, and its rate."""

    summarized: int = 0
    failed: int = 0
    skipped: int = 0
    errors: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    tokens: int = 0  # summary tokens written
    stages: Counter = field(default_factory=Counter)  # seconds in paging (tokenizing), select, encode, decode

    @property
    def documents_per_second(self) -> float:
        return (self.summarized + self.failed) / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"summarized": self.summarized, "failed": self.failed, "skipped": self.skipped,
                "errors": dict(self.errors), "seconds": round(self.seconds, 3),
                "documents_per_second": round(self.documents_per_second, 3),
                "summary_tokens_per_second": round(self.tokens / self.seconds, 3) if self.seconds else 0.0,
                "stage_seconds": {stage: round(value, 3) for stage, value in self.stages.items()}}


@dataclass(frozen=True)
class Line:
    """One input line: its number (from 1), id, and either its documents and query or why it cannot be read."""

    number: int
    id: str
    documents: list[str] | None = None
    query: str | None = None
    error: LocsumError | None = None


FILE_FIELD = "file"  # a line's file (or list of files) to read its documents from, where it has no documents


def read_line(raw: bytes, number: int, fields: Fields, folder: Path | None = None) -> Line:
    """Parse one input line; a line that cannot be used becomes a Line with its error (the job goes on). Relative
    paths of its files are read from `folder` (default: the working directory)."""
    default = f"line-{number}"
    try:
        row = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as err:  # ValueError: JSON errors and integers past Python's digit limit
        return Line(number, default, error=DataError(f"line {number}: not a JSON line ({err})"))
    except RecursionError:
        return Line(number, default, error=DataError(f"line {number}: JSON nested too deeply to read"))
    if not isinstance(row, dict):
        return Line(number, default, error=DataError(f"line {number}: a JSON {type(row).__name__}, not an object"))
    ident = row.get(fields.id, default)
    if not isinstance(ident, str | int | float | bool | None):
        return Line(number, default, error=DataError(f"line {number}: '{fields.id}' must be a string or a number, "
                                                     f"not a JSON {type(ident).__name__}"))
    ident = ident if isinstance(ident, str) else json.dumps(ident)
    documents, query = row.get(fields.documents), row.get(fields.query)
    if query is not None and not isinstance(query, str):
        return Line(number, ident, error=DataError(f"line {number}: '{fields.query}' must be a string or null"))
    if documents is None and FILE_FIELD in row:
        return _file_line(row[FILE_FIELD], number, ident, query, folder)
    if isinstance(documents, str):
        documents = [documents]
    if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
        return Line(number, ident, error=DataError(
            f"line {number}: '{fields.documents}' must be a string or a non-empty list of strings, or the line must "
            f"name a file ('{FILE_FIELD}')"))
    return Line(number, ident, documents, query)


def _file_line(files: Any, number: int, ident: str, query: str | None, folder: Path | None) -> Line:
    from .files import read_file

    names = [files] if isinstance(files, str) else files
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        return Line(number, ident, error=DataError(f"line {number}: '{FILE_FIELD}' must be a path or a non-empty "
                                                   "list of paths"))
    try:
        read = [read_file((folder or Path()) / name, name=name) for name in names]
    except LocsumError as err:
        return Line(number, ident, error=err)
    return Line(number, ident, [document for file in read for document in file.documents()], query)


def record_of(summarizer: Any, options: dict[str, Any], fields: Fields) -> dict[str, Any]:
    """What a resumed job must share with the job that wrote the output."""
    bundle = getattr(summarizer.backend, "bundle", None)
    return {"bundle": bundle.fingerprint if bundle is not None else summarizer.kind.name,
            "kind": summarizer.kind.name, "options": options,
            "fields": {"documents": fields.documents, "query": fields.query, "id": fields.id}}


def _written(output: Path) -> tuple[int, str | None]:
    """Complete lines of the output and the id of the last; a trailing partial line is cut off."""
    count, last, good_end = 0, None, 0
    with open(output, "rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                break
            try:
                last = json.loads(raw)["id"]
            except (ValueError, UnicodeDecodeError, KeyError, TypeError, RecursionError):
                break
            count, good_end = count + 1, good_end + len(raw)
    if good_end != output.stat().st_size:
        logger.warning("%s ends in a partial line (a job stopped in mid-write); it is cut off", output)
        with open(output, "r+b") as handle:
            handle.truncate(good_end)
    return count, last


def _lines(path: Path, fields: Fields, start: int) -> Iterator[Line]:
    """Input lines after the first `start` non-blank ones."""
    with open(path, "rb") as handle:
        seen = 0
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            seen += 1
            if seen > start:
                yield read_line(raw, number, fields, path.parent)


def _count(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for raw in handle if raw.strip())


def _error(line_id: str, err: Exception) -> dict[str, Any]:
    return {"id": line_id, "error": {"type": type(err).__name__, "message": str(err)}}


def _row(line: Line, summary: Any) -> dict[str, Any]:
    """A line's output row: its summary, its token count, each sentence's span, whether it is supported and its
    passages (document and character span), and the summary's warnings."""
    sentences = [{"start": sentence.start, "end": sentence.end, "supported": sentence.supported,
                  "passages": [[p.document, p.start, p.end] for p in sentence.passages]}
                 for sentence in summary.sentences]
    return {"id": line.id, "summary": summary.text, "tokens": len(summary.token_ids), "sentences": sentences,
            "warnings": summary.warnings}


def summarize_lines(summarizer: Any, batch: list[Line], overrides: dict[str, Any], stages: Counter
                    ) -> list[dict[str, Any]]:
    """Summaries (or errors) of a batch of lines, as output rows (with their summary's token count): together when
    they can be, one by one to isolate a bad input. Adds each call's stage timings to `stages`."""
    ready = [line for line in batch if line.error is None]
    results: dict[int, dict[str, Any]] = {line.number: _error(line.id, line.error) for line in batch if line.error}
    if ready:
        try:
            summaries = summarizer.summarize_batch([line.documents for line in ready],
                                                   [line.query for line in ready], **overrides)
            results.update({line.number: _row(line, s) for line, s in zip(ready, summaries)})
            stages.update(_stages(summaries[0].timings))  # one call: its timings are the batch's
        except InputError:
            for line in ready:
                try:
                    summary = summarizer.summarize(line.documents, query=line.query, **overrides)
                    results[line.number] = _row(line, summary)
                    stages.update(_stages(summary.timings))
                except InputError as err:
                    results[line.number] = _error(line.id, err)
    return [results[line.number] for line in batch]


def _stages(timings: dict[str, float]) -> dict[str, float]:
    return {stage: seconds for stage, seconds in timings.items() if stage != "total"}


class LocalEngine:
    """Summarizes the batches in this process, one after the other."""

    def __init__(self, summarizer: Any):
        self.summarizer = summarizer

    def map(self, batches: Iterator[list[Line]], overrides: dict[str, Any]
            ) -> Iterator[tuple[list[dict[str, Any]], Counter]]:
        """Each batch's output rows and stage seconds, in batch order."""
        for batch in batches:
            stages: Counter = Counter()
            yield summarize_lines(self.summarizer, batch, overrides, stages), stages


def run_job(summarizer: Any, input_path: str | os.PathLike, output_path: str | os.PathLike, *,
            resume: bool = False, batch_size: int = 8, fields: Fields | None = None,
            overrides: dict[str, Any] | None = None, progress: bool = True, engine: Any = None) -> Report:
    """Summarize every line of `input_path` into `output_path` (see the module docstring); returns the report.

    summarizer: checks the options and names the bundle in the job's record; engine: what summarizes the batches
    (`map(batches, overrides)` yields each batch's rows and stage seconds in batch order): `LocalEngine(summarizer)`
    by default, or `locsum_sdk.ray_engine.RayEngine` to spread them over a Ray cluster. The output is locked for the
    run (`job_lock`): a second job on it raises `JobLockedError` at once."""
    fields, overrides = fields or Fields(), dict(overrides or {})
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise OptionError(f"batch_size={batch_size!r}: give a whole number of inputs of at least 1")
    source, output = Path(input_path), Path(output_path)
    if not source.is_file():
        raise DataError(f"input {source} does not exist; give a JSON Lines file")
    summarizer.options(**overrides)  # an unknown or out-of-range option stops the job before it starts
    with output_lock(output):  # one job per output, for the whole run
        return _run(summarizer, source, output, resume, batch_size, fields, overrides, progress, engine)


def _run(summarizer: Any, source: Path, output: Path, resume: bool, batch_size: int, fields: Fields,
         overrides: dict[str, Any], progress: bool, engine: Any) -> Report:
    from tqdm import tqdm

    record = record_of(summarizer, overrides, fields)
    sidecar = output.with_name(output.name + JOB_SUFFIX)
    done, last = 0, None
    if output.exists():
        if not resume:
            raise OptionError(f"{output} already exists; pass --resume to go on with it, or remove it")
        if not sidecar.is_file():
            raise OptionError(f"{output} has no {sidecar.name}: it was not written by `locsum batch`; remove it")
        previous = json.loads(sidecar.read_text(encoding="utf-8"))
        if previous != record:
            differs = sorted(key for key in record if previous.get(key) != record[key])
            raise OptionError(f"{output} was written by a job that differs from this one in its "
                              f"{' and '.join(differs)} (see {sidecar.name}); resume with the same bundle, options "
                              "and fields, or write a new output")
        done, last = _written(output)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = sidecar.with_name(sidecar.name + ".tmp")
        staging.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
        os.replace(staging, sidecar)
        output.touch()
    report, started = Report(skipped=done), time.perf_counter()
    lines = _lines(source, fields, max(done - 1, 0))
    if done:  # the last input written must be the same input line: read it once, then go on after it
        expected = next(lines, None)
        if expected is None or expected.id != last:
            raise OptionError(f"{output}'s last line is input {last!r}, but input line {done} of {source} is "
                              f"{expected.id if expected else 'missing'!r}: the input changed; write a new output")
    total = _count(source)  # one quick pass over the bytes, for the progress bar's remaining time
    bar = tqdm(total=total, initial=done, unit="doc", desc="summarize", disable=not progress, dynamic_ncols=True)
    engine = engine if engine is not None else LocalEngine(summarizer)
    descriptor = os.open(output, os.O_WRONLY | os.O_APPEND)
    try:
        for rows, stages in engine.map(_batches(lines, batch_size), overrides):
            _write(descriptor, rows, report, bar)
            report.stages.update(stages)
    finally:
        os.close(descriptor)
        bar.close()
        report.seconds = time.perf_counter() - started
    return report


def _batches(lines: Iterator[Line], size: int) -> Iterator[list[Line]]:
    batch: list[Line] = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _write(descriptor: int, rows: list[dict[str, Any]], report: Report, bar: Any) -> None:
    for row in rows:
        if "error" in row:
            report.failed += 1
            report.errors[row["error"]["type"]] += 1
        else:
            report.summarized += 1
            report.tokens += row.pop("tokens")
        data = (json.dumps(row) + "\n").encode("utf-8")  # ASCII: no U+2028 or U+0085 to split a line
        while data:  # one write for a line unless the system takes less; a cut line is dropped on resume
            data = data[os.write(descriptor, data):]
    os.fsync(descriptor)
    bar.update(len(rows))
    bar.set_postfix(errors=report.failed)
