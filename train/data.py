"""Training data: the JSON Lines schema of ../shared/data, read lazily, paged by `locsum_sdk.units`.

Files are indexed by byte offset and each example is parsed and paged only when it is used, so a 70 MB file
is never held as token tensors. Pages come from the same `Pager` the runtime uses, so training and serving
see identical inputs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from locsum_sdk.errors import DataError
from locsum_sdk.evaluation import parse_line
from locsum_sdk.kinds import keep_top
from locsum_sdk.limits import tfidf_cosine
from locsum_sdk.units import Pager, split_sentences

from .batching import Batch, Sample, collate


@dataclass(frozen=True)
class Example:
    id: str
    documents: list[str]
    query: str | None
    summary: str
    source: str


def parse_example(raw: bytes, path: str | os.PathLike, number: int, require_summary: bool = True) -> Example:
    """Line `number` of `path`, checked by `locsum_sdk.evaluation.parse_line` (a DataError naming `path:number`);
    text for pretraining (`require_summary=False`) may have no summary."""
    row = parse_line(raw, f"{path}:{number}", number, require_summary)
    return Example(row["id"], row["documents"], row["query"], row["summary"], row["source"])


def read_jsonl(path: str | os.PathLike, require_summary: bool = True) -> Iterator[Example]:
    """Stream the examples of one file."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                yield parse_example(line, path, number, require_summary)


def unique_documents(paths: Sequence[str | os.PathLike]) -> Iterator[str]:
    """Every distinct source document of the files (QMSum repeats a meeting once per query); rows of text for
    pretraining need no summary."""
    seen: set[bytes] = set()
    for path in paths:
        for example in read_jsonl(path, require_summary=False):
            for document in example.documents:
                key = hashlib.sha1(document.encode()).digest()
                if key not in seen:
                    seen.add(key)
                    yield document


class JsonlIndex:
    """Random access to the lines of JSON Lines files by byte offset. Every line is checked when indexed, so a bad
    line stops a run before it trains, naming its file and line."""

    def __init__(self, paths: Sequence[str | os.PathLike], require_summary: bool = True):
        self.require_summary = require_summary
        self.entries: list[tuple[Path, int, int]] = []
        for path in map(Path, paths):
            offset = 0
            with open(path, "rb") as handle:
                for number, line in enumerate(handle, 1):
                    if line.strip():
                        parse_example(line, path, number, require_summary)
                        self.entries.append((path, offset, number))
                    offset += len(line)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int) -> Example:
        path, offset, number = self.entries[index]
        with open(path, "rb") as handle:
            handle.seek(offset)
            return parse_example(handle.readline(), path, number, self.require_summary)


def check_data(paths: Sequence[str | os.PathLike], require_summary: bool = True) -> None:
    """Each file exists and holds examples, every line of the data schema: a DataError naming the file (and line)
    otherwise. One parse per line, so a run can afford it before it loads anything. Denoising reads documents
    only (`require_summary=False`)."""
    for path in map(Path, paths):
        if not path.is_file():
            raise DataError(f"{path}: no such data file; check the config's train_files and val_files (public text "
                            f"for pretraining is built by `python -m train.public_text`, see train/DATA.md)")
        if not len(JsonlIndex([path], require_summary)):
            raise DataError(f"{path} holds no examples; give a JSON Lines file with one example per line")


class SummarizationSet:
    """Examples -> (pages, summary ids); over-long inputs keep `max_pages` pages (None: all): their first (`keep`
    "first"), or the ones closest to the reference summary by tf-idf cosine, in their order ("summary": a long
    meeting's pages the summary speaks of, not its opening; for training examples, never for validation's)."""

    def __init__(self, paths: Sequence[str | os.PathLike], pager: Pager, tokenizer, max_target_tokens: int,
                 max_pages: int | None = None, keep: str = "first"):
        self.index, self.pager, self.tokenizer = JsonlIndex(paths), pager, tokenizer
        self.max_target_tokens, self.max_pages, self.keep = max_target_tokens, max_pages, keep

    @property
    def checkpoint_files(self) -> dict[str, Path]:
        """Files every checkpoint of a model trained on this set carries besides its tokenizer, by name."""
        return {}

    def __len__(self) -> int:
        return len(self.index)

    def example(self, index: int) -> Example:
        return self.index[index]

    def units(self, example: Example) -> list:
        """The example's units as the runtime makes them (`Unit`s), at most `max_pages` of them (see the class)."""
        units = self.pager(example.documents, example.query)
        if self.max_pages is None or len(units) <= self.max_pages or self.keep == "first":
            return units[: self.max_pages]
        summary = self.tokenizer.encode(summary_text(example), add_special_tokens=False).ids
        return keep_top(units, tfidf_cosine([u.text_ids for u in units], summary), self.max_pages, ranked=False)

    def target(self, example: Example) -> list[int]:
        """The summary's ids and the eos, at most `max_target_tokens`: a longer summary is cut at its last sentence
        end that fits, so that the eos follows a finished sentence (mid-sentence only where its first sentence
        alone is too long)."""
        summary = summary_text(example)
        encoding = self.tokenizer.encode(summary, add_special_tokens=False)
        room = self.max_target_tokens - 1
        if len(encoding.ids) <= room:
            return encoding.ids + [self.pager.special.eos]
        ends = {end for _, end in split_sentences(summary)}
        cut = next((n for n in range(room, 0, -1) if encoding.offsets[n - 1][1] in ends), room)
        return encoding.ids[:cut] + [self.pager.special.eos]

    def get(self, index: int, epoch: int = 0) -> Sample:
        example = self.index[index]
        return Sample([list(u.token_ids) for u in self.units(example)], self.target(example))

    def collate(self, samples: list[Sample], pad: int, decoder_start: int) -> Batch:
        return collate(samples, pad, decoder_start)

    def inference_units(self, model, sample: Sample) -> list[list[int]]:
        """The units a summary of `sample` is generated from at validation: all of them."""
        return sample.units


def summary_text(example: Example) -> str:
    """The reference summary as training tokenizes it: stripped, after one space (its first word as in a text)."""
    return " " + example.summary.strip()


def segments(documents: Iterator[str], tokenizer, max_tokens: int) -> list[np.ndarray]:
    """Documents -> runs of whole sentences of at most `max_tokens` ids each (for denoising pretraining)."""
    out: list[np.ndarray] = []
    for document in documents:
        spans = split_sentences(document)
        encodings = tokenizer.encode_batch([" " + document[s:e] for s, e in spans], add_special_tokens=False)
        current: list[list[int]] = []
        size = 0
        for enc in encodings:
            ids = enc.ids[:max_tokens]
            if current and size + len(ids) > max_tokens:
                out.append(_pack(current))
                current, size = [], 0
            current.append(ids)
            size += len(ids)
        if current:
            out.append(_pack(current))
    return out


def _pack(sentences: list[list[int]]) -> np.ndarray:
    """Sentences as one int32 array with -1 between sentences (kept for sentence permutation)."""
    joined: list[int] = []
    for ids in sentences:
        joined.extend(ids)
        joined.append(-1)
    return np.array(joined[:-1], dtype=np.int32)


CALIBRATION_SETS = ("qmsum", "squality", "fewsum")  # the training mix's sets
CALIBRATION_EVERY = 25  # every 25th train example of each: 64 inputs (51 meetings' queries, 10 stories', 3 products')


def calibration_texts(data: str | os.PathLike) -> list[str]:
    """Inputs of the training mix's train splits for int8 unit rows' scales (`exporters.unit_rows`): every
    `CALIBRATION_EVERY`th example of each set whose train split is in `data`, its documents joined."""
    texts = []
    for name in CALIBRATION_SETS:
        path = Path(data) / name / "train.jsonl"
        if not path.is_file():
            continue
        for i, example in enumerate(read_jsonl(path)):
            if i % CALIBRATION_EVERY == 0:
                texts.append("\n".join(example.documents))
    return texts
