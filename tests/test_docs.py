"""The documentation is tested: the site builds with `mkdocs build --strict` (no broken link or reference), and every
shell and Python block of README.md and docs/ runs, in a working directory holding the files the examples name
(`report.txt`, `meeting.txt`, `a.txt`..., `corpus.jsonl`, a checkpoint) and the shipped bundles.

A block that cannot run here says why in a `<!-- not run: REASON -->` line just before it (an install, a GPU, a
cluster, hours of training); its command lines are still parsed by the parsers of the commands they call, and the
training configs they name are read, so a renamed flag or config breaks the docs' test. Synopses are `text` blocks.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?:<!-- not run: (?P<reason>[^\n]*?) -->\n)?```(?P<language>[\w-]*)[^\n]*\n(?P<code>.*?)^```",
                   re.M | re.S)
RUN = ("bash", "python")  # the languages of runnable blocks; others (text, json, toml) are shown only
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    code: str
    reason: str | None  # why it is not run, or None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start("language")) + 1
            found.append(Block(page, line, match["language"], match["code"], match["reason"]))
    return found


BLOCKS = blocks()


def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "from_pretrained" in api and "summarize_batch" in api and "MemoryLimitError" in api  # from docstrings


def test_every_block_is_run_or_says_why_not():
    assert len(BLOCKS) >= 20
    for block in BLOCKS:
        assert block.language, f"{block.name}: name the block's language (text for a synopsis)"
        if block.reason is not None:
            assert block.language in RUN and len(block.reason) > 10, block.name


def foreign_checkpoints(work: Path, tokenizer_file: Path) -> None:
    """Tiny random files in the layouts the Bring your own model page converts, all of the test tokenizer's 400
    token ids: an HF BART directory, PageSum's research state dict, DYLE's research files, nlpyang/hiersumm's
    checkpoint; and the tokenizer itself as tokenizer.json. Beside them, two tiny LLMs with vocabularies of their
    own: a Qwen2 HF directory (`my-qwen2`) and a Llama GGUF file (`my-llama.gguf`)."""
    import dataclasses

    import torch
    from conftest import hf_bart_directory
    from test_dyle import research_files
    from test_hiersumm import CONFIG, research_file

    shutil.copyfile(tokenizer_file, work / "tokenizer.json")
    hf = hf_bart_directory(work / "my-hf-bart")
    shutil.copyfile(tokenizer_file, hf / "tokenizer.json")
    (work / "pagesum-research").mkdir()
    import transformers

    state = dict(transformers.BartForConditionalGeneration.from_pretrained(hf).state_dict())
    state["lin.weight"], state["lin.bias"] = torch.randn(1, 16), torch.zeros(1)
    torch.save(state, work / "pagesum-research" / "pagesum.bin")
    shutil.copyfile(hf / "config.json", work / "pagesum-research" / "config.json")
    (work / "dyle-research").mkdir()
    research_files(work / "dyle-research", vocab_size=400)
    config = dataclasses.replace(CONFIG, vocab_size=400, share_embeddings=False, tie_generator=False,
                                 pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)
    research_file(work / "model_step_1000.pt", config)
    from llm_files import FAMILIES, write_gguf, write_hf

    write_hf(FAMILIES["qwen2"], work / "my-qwen2")
    directory, model = write_hf(FAMILIES["llama"], work / "llama-hf")
    write_gguf(FAMILIES["llama"], directory, work / "my-llama.gguf", model)
    shutil.rmtree(directory)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, checkpoint_dir, tokenizer_file) -> Path:
    """A directory holding what the examples read: texts (cuts of the example meeting), a PDF, an HTML page, a Word
    document and Markdown (`document_files`), a corpus, a checkpoint, the shipped bundles, and foreign checkpoints
    (`foreign_checkpoints`)."""
    from document_files import write_docx, write_html, write_markdown, write_pdf

    work = tmp_path_factory.mktemp("docs")
    foreign_checkpoints(work, tokenizer_file)
    meeting = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8")
    paragraphs = [p for p in meeting.split("\n") if p.strip()]
    # cuts of the example meeting (8,600 and 1,900 characters: pages of the default bundle, two chunks of the live
    # example), so the blocks that summarize them with the default bundle at 4 beams run in seconds
    (work / "meeting.txt").write_text("\n".join(paragraphs[:50]), encoding="utf-8")
    (work / "report.txt").write_text("\n".join(paragraphs[:10]), encoding="utf-8")
    for index, name in enumerate(("a.txt", "b.txt", "c.txt")):
        (work / name).write_text("\n".join(paragraphs[index * 8 : index * 8 + 8]), encoding="utf-8")
    write_pdf("\n".join(paragraphs[:40]), work / "report.pdf")
    write_html("\n".join(paragraphs[40:60]), work / "page.html")
    write_docx("\n".join(paragraphs[60:80]), work / "notes.docx")
    write_markdown("\n".join(paragraphs[80:100]), work / "notes.md")
    rows = [{"id": f"doc-{i}", "documents": ["\n".join(paragraphs[i * 5 : i * 5 + 5])]} for i in range(3)]
    (work / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (work / "my-run" / "checkpoints").mkdir(parents=True)
    (work / "my-run" / "checkpoints" / "step-0000060").symlink_to(checkpoint_dir, target_is_directory=True)
    for shipped in ("engines", "examples", "train"):
        (work / shipped).symlink_to(ROOT / shipped, target_is_directory=True)
    return work


def runnable(block: Block) -> bool:
    return block.language in RUN and block.reason is None


@pytest.mark.parametrize("block", [b for b in BLOCKS if runnable(b) and b.language == "bash"], ids=lambda b: b.name)
def test_shell_block_runs(block, workspace):
    if "curl " in block.code and shutil.which("curl") is None:
        pytest.skip("curl is not installed here")
    env = {k: v for k, v in os.environ.items() if k != "LOCSUM_BUNDLE"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{block.name} failed:\n{block.code}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if runnable(b) and b.language == "python"], ids=lambda b: b.name)
def test_python_block_runs(block, workspace, monkeypatch, capsys):
    monkeypatch.chdir(workspace)
    monkeypatch.delenv("LOCSUM_BUNDLE", raising=False)
    exec(compile(block.code, block.name, "exec"), {"__name__": "__docs__"})
    capsys.readouterr()


class Parsed(Exception):
    """Raised instead of running a command once its arguments parsed."""

    def __init__(self, namespace: argparse.Namespace):
        self.namespace = namespace


def commands(code: str) -> list[list[str]]:
    """The command lines of a shell block: continuations joined, comments dropped, `&&` chains split."""
    lines = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            lines.append(words[:cut])
            words = words[cut + 1 :]
    return lines


def parse_only(argv: list[str]) -> argparse.Namespace | None:
    """Parse a documented command line with the parser of the command it calls (None: not one of ours)."""
    program, *rest = argv
    if program == "torchrun":
        rest = rest[rest.index("-m"):]
        program = "python"
    if program == "locsum":
        from locsum_sdk.cli import main

        return _parsed(lambda: main(rest))
    if program in ("python", "python3") and rest[:1] == ["-m"] and rest[1].split(".")[0] == "train":
        module = importlib.import_module(rest[1])
        if not hasattr(module, "main"):  # a package run by its __main__
            module = importlib.import_module(f"{rest[1]}.__main__")
        return _parsed(lambda: module.main(rest[2:]))
    if program in ("python", "python3") and rest and rest[0].endswith(".py"):
        def run():
            sys.argv = [rest[0], *rest[1:]]
            runpy.run_path(str(ROOT / rest[0]), run_name="__main__")

        return _parsed(run)
    if program == "pip" and rest[:2] == ["install", "-e"]:
        extras = re.fullmatch(r"\.\[([\w,-]+)\]", rest[2])
        assert extras and set(extras[1].split(",")) <= set(EXTRAS), f"pip install {rest[2]}: not an extra"
    return None


def _parsed(run) -> argparse.Namespace:
    original, argv = argparse.ArgumentParser.parse_args, sys.argv

    def parse(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    argparse.ArgumentParser.parse_args = parse
    try:
        run()
    except Parsed as parsed:
        return parsed.namespace
    finally:
        argparse.ArgumentParser.parse_args, sys.argv = original, argv
    raise AssertionError("the command ran without parsing its arguments")


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.reason is not None and b.language == "bash"],
                         ids=lambda b: b.name)
def test_a_block_not_run_still_parses(block, monkeypatch):
    from train.config import TrainConfig

    monkeypatch.chdir(ROOT)
    for argv in commands(block.code):
        if argv[0] in (".", "source"):
            continue
        try:
            namespace = parse_only(argv)
        except SystemExit as exit:
            raise AssertionError(f"{block.name}: {shlex.join(argv)} does not parse (exit {exit.code})") from None
        config = getattr(namespace, "config", None)
        if isinstance(config, str) and config.startswith("train/configs/"):
            TrainConfig.load(ROOT / config)
