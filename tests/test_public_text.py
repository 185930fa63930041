"""Public text for pretraining: sources read at their pinned commits, Project Gutenberg's boilerplate removed,
held-out (val and test) text kept out, all-or-nothing output, and denoising reading rows without a summary."""

import json
import random
import subprocess
import textwrap

import pytest
from conftest import document

from locsum_sdk.errors import DataError, OptionError
from locsum_sdk.exporters.staging import usual_mode
from train import public_text
from train.public_text import NGRAM, Source, build, load_sources

HEADER = ("The Project Gutenberg EBook of A Test, by Nobody\r\n\r\n"
          "*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***\r\n")
FOOTER = ("\r\nEnd of the Project Gutenberg EBook of A Test\r\n\r\n"
          "*** END OF THIS PROJECT GUTENBERG EBOOK A TEST ***\r\n")
LICENCE = "\r\nTHE FULL PROJECT GUTENBERG LICENSE: distribute it under these terms.\r\n"


def wrapped(paragraphs):
    """Paragraphs hard-wrapped at 60 columns with CRLF, as Project Gutenberg writes them."""
    return "\r\n\r\n".join("\r\n".join(textwrap.wrap(p, 60)) for p in paragraphs)


def git_repo(path, files: dict[str, bytes]) -> str:
    path.mkdir(parents=True)
    for name, data in files.items():
        (path / name).write_bytes(data)
    run = dict(cwd=path, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **run)
    subprocess.run(["git", "add", "."], **run)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "book"], **run)
    return subprocess.run(["git", "rev-parse", "HEAD"], **run, text=True).stdout.strip()


def source(repo: str, commit: str, file: str = "book.txt", encoding: str = "utf-8") -> Source:
    return Source(repo, commit, file, encoding, "A Test", "Nobody", "Public domain in the USA")


@pytest.fixture
def corpus(tmp_path):
    """A book whose third paragraph is quoted by a test split and whose fourth is in a train split."""
    rng = random.Random(3)
    paragraphs = [p.replace("\n", " ") for p in document(rng, 60).split("\n\n")]
    assert len(paragraphs) > 6 and all(len(p.split()) >= NGRAM for p in paragraphs[2:4])
    body = ["Produced by Someone and the Online Distributed Proofreading Team",
            "This book is _not_ a real book; it was made for a test.", *paragraphs]
    repos, data = tmp_path / "repos", tmp_path / "data"
    commit = git_repo(repos / "Owner" / "Book_1", {"book.txt": (HEADER + wrapped(body) + FOOTER + LICENCE).encode()})
    (data / "set").mkdir(parents=True)
    (data / "set" / "test.jsonl").write_text(json.dumps(
        {"documents": ["Unrelated words first. " + paragraphs[2]], "summary": "s", "query": None}) + "\n")
    (data / "set" / "train.jsonl").write_text(json.dumps(
        {"documents": [paragraphs[3]], "summary": "s", "query": None}) + "\n")
    return repos, data, commit, paragraphs


def test_a_book_is_read_at_its_commit_cleaned_and_kept_apart_from_held_out_text(tmp_path, corpus):
    repos, data, commit, paragraphs = corpus
    out = tmp_path / "out" / "text.jsonl"
    reports = build([source("Owner/Book_1", commit)], repos, data, out, progress=False)
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    text = row["documents"][0]
    kept = text.split("\n")
    assert kept[0] == "This book is not a real book; it was made for a test."  # unwrapped, emphasis marks gone
    assert paragraphs[2] not in kept and paragraphs[3] in kept  # the test split's paragraph dropped; train's kept
    assert kept[1:] == [p for i, p in enumerate(paragraphs) if i != 2]
    assert "gutenberg" not in text.lower() and "Produced by" not in text and "\r" not in text
    assert "summary" not in row and row["license"] == "Public domain in the USA"
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    (book,) = manifest["books"]
    assert book["commit"] == commit and book["dropped_paragraphs"] == 1 and book["skipped"] == ""
    assert book["sha256"] == reports[0].sha256 and manifest["held_out"] == ["set/test.jsonl"]
    assert book["words"] == sum(len(public_text.words_of(p)) for p in kept)
    assert out.stat().st_mode & 0o777 == usual_mode(0o666)  # as open() makes files, not mkstemp's 0600


def test_denoising_reads_rows_without_a_summary(tmp_path, corpus, tokenizer_file):
    from test_training import run_config

    from train.__main__ import build as build_run
    from train.data import check_data

    repos, data, commit, _ = corpus
    out = tmp_path / "text.jsonl"
    build([source("Owner/Book_1", commit)], repos, data, out, progress=False)
    with pytest.raises(DataError, match="'summary' must be a string"):
        check_data([out])  # a summarization run still needs summaries
    config = run_config(tmp_path, out, tokenizer_file, "denoise", "public", max_steps=2, eval_every=2)
    records = build_run(config, progress=False).train()
    assert [r["step"] for r in records] == [1, 2] and all(r["loss"] > 0 for r in records)


def test_books_that_cannot_be_used_are_skipped_with_the_reason(tmp_path, corpus):
    repos, data, commit, paragraphs = corpus
    bare = git_repo(repos / "Owner" / "Bare_2", {"book.txt": wrapped(paragraphs).encode(),
                                                 "latin.txt": (HEADER + "caf\xe9 " * 40 + FOOTER).encode("latin-1")})
    quoted = git_repo(repos / "Owner" / "Quoted_3", {"book.txt": (HEADER + wrapped(paragraphs[2:3]) + FOOTER).encode()})
    sources = [source("Owner/Book_1", commit), source("Owner/Bare_2", bare), source("Owner/Bare_2", bare, "latin.txt"),
               source("Owner/Quoted_3", quoted)]
    out = tmp_path / "text.jsonl"
    reports = build(sources, repos, data, out, progress=False)
    assert [r.skipped.split(" (")[0] for r in reports] == [
        "", "no Project Gutenberg start and end markers around the text", "not utf-8",
        f"{len(public_text.words_of(paragraphs[2]))} of {len(public_text.words_of(paragraphs[2]))} words share "
        f"{NGRAM}-word runs with held-out data"]
    assert len(out.read_text().splitlines()) == 1
    latin = build([source("Owner/Bare_2", bare, "latin.txt", "latin-1")], repos, data, out, progress=False)
    assert latin[0].skipped == "" and "café café" in out.read_text()


@pytest.mark.parametrize(("change", "message"), [
    ({"repo": "Owner/Missing_9"}, r"no clone under .*; run `git clone https://github.com/Owner/Missing_9"),
    ({"commit": "0" * 40}, "at commit 000000000000 is not in"),
    ({"file": "absent.txt"}, "absent.txt at commit"),
])
def test_a_missing_clone_commit_or_file_stops_the_build_and_writes_nothing(tmp_path, corpus, change, message):
    repos, data, commit, _ = corpus
    out = tmp_path / "out" / "text.jsonl"
    sources = [source("Owner/Book_1", commit), Source(**{**vars(source("Owner/Book_1", commit)), **change})]
    with pytest.raises(DataError, match=message):
        build(sources, repos, data, out, progress=False)
    assert not out.parent.exists() or not any(out.parent.iterdir())
    assert public_text.main(["--repos", str(repos), "--data", str(tmp_path / "nowhere"), "--output", str(out),
                             "--quiet"]) == 2  # no held-out data: refused, never built unchecked


@pytest.mark.parametrize(("table", "message"), [
    ('repo = "a/b"\ncommit = "abc"', "needs exactly"),
    ('repo = "a/b"\ncommit = "12"\nfile = "f"\nencoding = "utf-8"\ntitle = "t"\nauthor = "a"\nlicense = "l"',
     "not a full 40-hex commit id"),
    (f'repo = "a b"\ncommit = "{"1" * 40}"\nfile = "f"\nencoding = "utf-8"\ntitle = "t"\nauthor = "a"\nlicense = "l"',
     "not a GitHub owner/name"),
    (f'repo = "a/b"\ncommit = "{"1" * 40}"\nfile = "f"\nencoding = "cp1252"\ntitle = "t"\nauthor = "a"\nlicense = "l"',
     "encoding='cp1252'"),
])
def test_a_bad_source_list_is_refused(tmp_path, table, message):
    path = tmp_path / "sources.toml"
    path.write_text("[[source]]\n" + table + "\n")
    with pytest.raises(OptionError, match=message):
        load_sources(path)


def test_the_shipped_sources_are_public_domain_books_at_pinned_commits():
    sources = load_sources()
    assert len(sources) >= 30 and len({s.repo for s in sources}) == len(sources)
    assert all(s.repo.startswith("GITenberg/") and s.license.startswith("Public domain in the USA") for s in sources)
    data_readme = (public_text.SOURCES.parent / "DATA.md").read_text()
    assert all(f"`{s.repo.split('/')[1]}` | `{s.commit[:12]}`" in data_readme for s in sources)
