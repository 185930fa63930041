"""Public text for denoising pretraining, from the public repositories listed in train/public_text.toml.

Each source is one book, public domain in the USA, read from a local clone of its GITenberg repository at the
pinned commit (`git show COMMIT:FILE`, so a moved branch changes nothing). Project Gutenberg's header, footer,
credits and every line naming it are removed, hard-wrapped lines become paragraphs, and every paragraph that shares
a 13-word run with any validation or test split of ../shared/data is dropped (a book that loses over a tenth of
its words that way is dropped whole): pretraining never sees what evaluation reads.

    git clone https://github.com/GITenberg/Emma_158 REPOS/GITenberg/Emma_158    # each listed repository
    python -m train.public_text --repos REPOS

writes one JSON line per book (`documents`: [its text], no summary: the denoising objective reads documents only)
to ~/.cache/locsum/public-text/public-text.jsonl, and beside it a manifest: each book's repository, commit,
license, sha256 of the file read, words kept and paragraphs dropped, and the held-out files checked. A failed
build leaves no output. train/DATA.md lists the sources and their licenses.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from locsum_sdk.errors import DataError, LocsumError, OptionError
from locsum_sdk.evaluation import parse_line
from locsum_sdk.exporters.staging import usual_mode

from .config import DATA

SOURCES = Path(__file__).with_name("public_text.toml")
OUTPUT = Path("~/.cache/locsum/public-text/public-text.jsonl")
NGRAM = 13  # words in a run shared with held-out text that drops a paragraph
MAX_DROPPED = 0.1  # share of a book's words dropped as held-out overlap past which the whole book is dropped
ENCODINGS = ("utf-8", "latin-1")
START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)
END = re.compile(r"^(\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg).*$", re.I | re.M)
CREDIT = re.compile(r"^(produced by|e-?text prepared by|this e-?text|transcribed (from|by)|transcriber'?s? note"
                    r"|\[illustration)", re.I)
WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Source:
    """One book: its GitHub repository, the commit and file read, and what the manifest records of it."""

    repo: str
    commit: str
    file: str
    encoding: str
    title: str
    author: str
    license: str

    @property
    def id(self) -> str:
        return "public-" + self.repo.replace("/", "-").lower()


def load_sources(path: str | os.PathLike = SOURCES) -> list[Source]:
    """The `[[source]]` tables of `path`, each checked (an OptionError naming the table otherwise)."""
    try:
        tables = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("source")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise OptionError(f"{path}: not a readable TOML list of sources ({err})") from None
    if not isinstance(tables, list) or not tables:
        raise OptionError(f"{path}: no [[source]] tables; list at least one repository, commit and file")
    sources = []
    for number, table in enumerate(tables, 1):
        fields = {name: table.get(name) for name in Source.__dataclass_fields__}
        where = f"{path}: source {number}"
        if set(table) - set(fields) or not all(isinstance(v, str) and v.strip() for v in fields.values()):
            raise OptionError(f"{where}: needs exactly {sorted(fields)}, each a non-empty string; got {sorted(table)}")
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", fields["repo"]):
            raise OptionError(f"{where}: repo={fields['repo']!r} is not a GitHub owner/name")
        if not re.fullmatch(r"[0-9a-f]{40}", fields["commit"]):
            raise OptionError(f"{where}: commit={fields['commit']!r} is not a full 40-hex commit id")
        if fields["encoding"] not in ENCODINGS:
            raise OptionError(f"{where}: encoding={fields['encoding']!r}; one of {ENCODINGS}")
        sources.append(Source(**fields))
    if len({s.id for s in sources}) != len(sources):
        raise OptionError(f"{path}: a repository is listed twice")
    return sources


def clone_of(repos: Path, repo: str) -> Path:
    """The local clone of `repo` under `repos`: REPOS/owner/name (a `git clone`) or REPOS/owner+name[/repo]."""
    owner, name = repo.split("/")
    for candidate in (repos / owner / name, repos / f"{owner}+{name}" / "repo", repos / f"{owner}+{name}"):
        if candidate.is_dir():
            return candidate
    raise DataError(f"{repo}: no clone under {repos}; run `git clone https://github.com/{repo} "
                    f"{repos / owner / name}`")


def read_source(repos: Path, source: Source) -> bytes:
    """The bytes of the source's file at its commit."""
    clone = clone_of(repos, source.repo)
    try:
        done = subprocess.run(["git", "-C", str(clone), "show", f"{source.commit}:{source.file}"],
                              capture_output=True, check=False)
    except FileNotFoundError:
        raise DataError("git is not installed; it reads each source at its pinned commit") from None
    if done.returncode:
        raise DataError(f"{source.repo}: {source.file} at commit {source.commit[:12]} is not in {clone} "
                        f"({done.stderr.decode(errors='replace').strip()}); fetch the repository's full history")
    return done.stdout


def book_text(raw: str) -> list[str]:
    """The paragraphs of a Project Gutenberg text: between its start and end markers, hard-wrapped lines joined,
    `_emphasis_` marks dropped, and every paragraph naming Project Gutenberg, or crediting a transcription, left
    out. A DataError when the markers are missing (the text could carry the licence's name)."""
    start, end = START.search(raw), END.search(raw)
    if start is None or end is None or end.start() < start.end():
        raise DataError("no Project Gutenberg start and end markers around the text")
    body = raw[start.end():end.start()].replace("\r\n", "\n").replace("\r", "\n")
    paragraphs = []
    for block in re.split(r"\n\s*\n", body):
        text = " ".join(line.strip() for line in block.splitlines() if line.strip())
        text = re.sub(r"(?<!\w)_([^_]+)_(?!\w)", r"\1", text)
        if text and "gutenberg" not in text.lower() and not CREDIT.match(text):
            paragraphs.append(text)
    return paragraphs


def words_of(text: str) -> list[str]:
    return WORD.findall(text.lower())


class HeldOut:
    """The 13-word runs of every validation and test split under a data directory (every JSON Lines file not
    named train.jsonl: documents, queries, summaries and references), as sorted 64-bit hashes."""

    def __init__(self, data: Path):
        self.files = sorted(p for p in data.rglob("*.jsonl") if p.name != "train.jsonl")
        if not self.files:
            raise DataError(f"{data}: no validation or test splits to keep out of the public text; give --data, "
                            f"the folder of the evaluation data (../shared/data)")
        self.vocabulary: dict[str, int] = {}
        seen: set[bytes] = set()
        runs = []
        for path in self.files:
            for text in _texts(path):
                key = hashlib.sha1(text.encode()).digest()
                if key not in seen:
                    seen.add(key)
                    runs.append(self.hashes(words_of(text)))
        self.runs = np.unique(np.concatenate(runs)) if runs else np.zeros(0, np.uint64)

    def ids(self, words: Sequence[str]) -> np.ndarray:
        vocabulary = self.vocabulary
        return np.fromiter((vocabulary.setdefault(w, len(vocabulary)) for w in words), np.uint64, len(words))

    def hashes(self, words: Sequence[str]) -> np.ndarray:
        """One 64-bit polynomial hash per run of NGRAM consecutive words (wrapping arithmetic)."""
        ids = self.ids(words) + np.uint64(1)
        if len(ids) < NGRAM:
            return np.zeros(0, np.uint64)
        out = np.zeros(len(ids) - NGRAM + 1, np.uint64)
        for k in range(NGRAM):
            out = out * np.uint64(1_000_003) + ids[k:len(ids) - NGRAM + 1 + k]
        return out

    def overlapping(self, words: Sequence[Sequence[str]]) -> np.ndarray:
        """For each paragraph (its `words_of`), whether a run of NGRAM words starting or ending in it is held
        out."""
        owner = np.repeat(np.arange(len(words)), [len(w) for w in words])
        runs = self.hashes([w for ws in words for w in ws])
        hit = np.zeros(len(words), bool)
        if len(runs) and len(self.runs):
            place = np.minimum(np.searchsorted(self.runs, runs), len(self.runs) - 1)
            found = self.runs[place] == runs
            hit[owner[:len(runs)][found]] = True
            hit[owner[NGRAM - 1:][found]] = True
        return hit


def _texts(path: Path) -> Iterable[str]:
    """Every text of a data file's rows (`parse_line`): documents, summary, query and references."""
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                row = parse_line(line, f"{path}:{number}", number, require_summary=False)
                references = row.get("references")
                references = references if isinstance(references, list) else []
                texts = [*row["documents"], row["summary"], row["query"], *references]
                yield from (text for text in texts if isinstance(text, str) and text)


@dataclass
class BookReport:
    id: str
    repo: str
    commit: str
    file: str
    title: str
    author: str
    license: str
    sha256: str = ""
    words: int = 0
    paragraphs: int = 0
    dropped_paragraphs: int = 0
    dropped_words: int = 0
    skipped: str = ""  # why the book is not in the output


def build(sources: Sequence[Source], repos: str | os.PathLike, data: str | os.PathLike, output: str | os.PathLike,
          progress: bool = True) -> list[BookReport]:
    """Write the public text of `sources` to `output` (JSON Lines) and its manifest beside it; both appear only
    when every book was read. A book without Project Gutenberg's markers, or mostly held-out text, is skipped and
    reported; a missing clone or commit stops the build."""
    repos, output = Path(repos).expanduser(), Path(output).expanduser()
    held_out = HeldOut(Path(data).expanduser())
    reports, rows = [], []
    for source in tqdm(sources, desc="public text", unit="book", disable=not progress):
        raw = read_source(repos, source)
        report = BookReport(source.id, source.repo, source.commit, source.file, source.title, source.author,
                            source.license, hashlib.sha256(raw).hexdigest())
        reports.append(report)
        try:
            paragraphs = book_text(raw.decode(source.encoding))
        except UnicodeDecodeError as err:
            report.skipped = f"not {source.encoding} ({err.reason} at byte {err.start})"
            continue
        except DataError as err:
            report.skipped = str(err)
            continue
        words = [words_of(p) for p in paragraphs]
        hit = held_out.overlapping(words)
        sizes = np.array([len(w) for w in words])
        report.dropped_paragraphs, report.dropped_words = int(hit.sum()), int(sizes[hit].sum())
        if report.dropped_words > MAX_DROPPED * max(1, sizes.sum()):
            report.skipped = f"{report.dropped_words} of {sizes.sum()} words share {NGRAM}-word runs with held-out data"
            continue
        kept = [p for p, h in zip(paragraphs, hit) if not h]
        report.paragraphs, report.words = len(kept), int(sizes[~hit].sum())
        if not kept:
            report.skipped = "no text left"
            continue
        rows.append({"id": source.id, "documents": ["\n".join(kept)], "query": None, "source": "public/" + source.repo,
                     "title": source.title, "license": source.license})
    manifest = {"ngram": NGRAM, "max_dropped": MAX_DROPPED,
                "held_out": [str(p.relative_to(Path(data).expanduser())) for p in held_out.files],
                "books": [asdict(r) for r in reports]}
    _write_together({output: "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                     output.with_suffix(".manifest.json"): json.dumps(manifest, indent=1, ensure_ascii=False) + "\n"})
    return reports


def _write_together(files: dict[Path, str]) -> None:
    """Write every file to a temporary name first, then move them all into place; nothing is left on failure."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            staged.append((temporary, path))
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(temporary, usual_mode(0o666))  # mkstemp makes it 0600
        for temporary, path in staged:
            os.replace(temporary, path)
    finally:
        for temporary, _ in staged:
            if os.path.exists(temporary):
                os.unlink(temporary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", required=True, help="the folder holding a clone of each listed repository")
    parser.add_argument("--sources", default=str(SOURCES), help="the TOML list of sources")
    parser.add_argument("--data", default=str(DATA), help="the evaluation data whose val and test splits are kept out")
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        reports = build(load_sources(args.sources), args.repos, args.data, args.output, progress=not args.quiet)
    except LocsumError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    kept = [r for r in reports if not r.skipped]
    for report in reports:
        if report.skipped:
            print(f"skipped {report.repo}: {report.skipped}", file=sys.stderr)
    print(f"{len(kept)} books, {sum(r.words for r in kept):,} words, {sum(r.dropped_paragraphs for r in kept)} "
          f"paragraphs dropped as held-out overlap -> {Path(args.output).expanduser()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
