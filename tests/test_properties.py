"""Property-based tests of every public entry point: whatever it is given, it returns its result (a `Summary`
keeping its invariants, an exit code 0 or 2) or raises a `locsum_sdk.errors` exception, never anything else.

A few hundred generated cases per entry point by default, 5,000 with `--slow` (hypothesis profiles in
conftest.py). Inputs mix realistic text with hostile text (controls, zero-width and bidi characters, lone
surrogates, very long words), wrong types, and valid and invalid options of every kind.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, json_values
from hypothesis import event, given
from hypothesis import strategies as st

from locsum_sdk import Summarizer, Summary
from locsum_sdk import constants as C
from locsum_sdk.bundle import ADDED_SETTINGS
from locsum_sdk.cli import main
from locsum_sdk.errors import BundleError, LocsumError

HOSTILE = ["\x00", "\u200b", "\ufeff", "\u202e", "\u2066", "\ud800", "\udfff", "\x1b[31m", "\r", "\t", "\u00ad",
           "\U0001f600", "é", "\u0301", "{vocalsound}", "...", "!?", "\n\n", "  "]


@st.composite
def texts(draw) -> str:
    """Realistic sentences with hostile pieces mixed in, or arbitrary Unicode, or a very long word."""
    kind = draw(st.sampled_from(["words", "words", "unicode", "long", "hostile"]))
    if kind == "unicode":
        return draw(st.text(st.characters(codec=None, exclude_categories=()), max_size=300))
    if kind == "long":
        return draw(st.sampled_from(["x", "budget ", "ab. ", "é"])) * draw(st.integers(1, 3000))
    pieces = draw(st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(HOSTILE) if kind == "hostile"
                                     else st.sampled_from([".", ",", "?"])), max_size=120))
    return " ".join(pieces)


def inputs():
    """What `summarize` may be handed: text, bytes, lists or tuples of them, and things it must refuse."""
    text = texts()
    valid = st.one_of(text, text.map(lambda t: t.encode("utf-8", "surrogatepass")),
                      st.lists(st.one_of(text, text.map(lambda t: t.encode("utf-8", "surrogatepass"))), max_size=4),
                      st.tuples(text, text))
    other = st.one_of(st.binary(max_size=200), st.dictionaries(st.text(max_size=3), text, max_size=2),
                      st.none(), st.integers(), st.floats(), st.lists(st.integers(), max_size=2))
    return st.integers(0, 9).flatmap(lambda roll: valid if roll < 8 else other)


def option_values():
    """Each option's values: mostly valid ones (some at the edges), sometimes a wrong type or value."""
    wrong = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
                      st.text(max_size=6), st.integers(-10, 10).map(str), st.lists(st.integers(), max_size=1))

    def mostly(valid, invalid):  # 8 in 10 valid
        return st.integers(0, 9).flatmap(lambda roll: valid if roll < 8 else invalid if roll == 8 else wrong)

    return {
        "num_beams": mostly(st.integers(1, 6), st.integers(-2, 0) | st.just(65)),
        "max_length": mostly(st.integers(2, 40), st.integers(-2, 1) | st.integers(129, 300)),
        "min_length": mostly(st.integers(0, 30), st.integers(-3, -1)),
        "length_penalty": mostly(st.floats(-10, 10), st.floats(10.5, 1e300)),
        "no_repeat_ngram_size": mostly(st.integers(0, 4), st.just(-1)),
        "repetition_penalty": mostly(st.floats(1, 10), st.floats(-1, 0.99) | st.floats(10.5, 1e300)),
        "word_repeat_penalty": mostly(st.floats(0, 20), st.floats(-5, -0.01) | st.floats(20.5, 1e300)),
        "end_penalty": mostly(st.floats(0, 20), st.floats(-5, -0.01) | st.floats(20.5, 1e300)),
        "early_stopping": mostly(st.booleans(), st.integers(0, 1)),
        "known_words": mostly(st.booleans(), st.sampled_from(["yes", 1])),
        "whole_sentences": mostly(st.booleans(), st.sampled_from(["no", 0])),
        "ngram_word_starts": mostly(st.booleans(), st.sampled_from(["yes", 1])),
        "policy": mostly(st.sampled_from(["spatial", "discourse", "document", "auto", "sentence", "turn", "blocks",
                                          "turns"]),
                         st.just("chapters")),
        "page_tokens": mostly(st.integers(8, 128), st.integers(0, 7) | st.integers(129, 10**6)),
        "snippet_tokens": mostly(st.integers(8, 128), st.integers(0, 7) | st.integers(129, 10**6)),
        "top_k": mostly(st.integers(1, 30), st.integers(-1, 0)),
        "chunk_tokens": mostly(st.integers(8, 128), st.integers(0, 7) | st.integers(129, 10**6)),
        "paragraph_tokens": mostly(st.integers(8, 128), st.integers(0, 7) | st.integers(129, 10**6)),
        "top_paragraphs": mostly(st.integers(1, 30), st.integers(-1, 0)),
        "num_pages": mostly(st.none() | st.integers(1, 40) | st.integers(10**6, 10**12), st.integers(-1, 0)),
        "max_tokens": mostly(st.integers(1, 400) | st.integers(10**5, 10**9), st.integers(-1, 0)),
        "truncate": mostly(st.booleans(), st.just("no")),
        "select": mostly(st.sampled_from(["first", "tfidf"]), st.just("best")),
        "memory_limit": mostly(st.none() | st.sampled_from(["1KB", "2MB", "20MB", "8GB"]) | st.integers(1, 10**10),
                               st.sampled_from(["lots", "0", "-1MB"]) | st.integers(-5, 0)),
        "temperature": st.floats(0, 2),  # unknown: always refused
    }


def options():
    values = option_values()
    return st.lists(st.sampled_from(sorted(values)), unique=True, max_size=3).flatmap(
        lambda names: st.fixed_dictionaries({name: values[name] for name in names}))


def queries():
    other = st.one_of(st.integers(), st.binary(max_size=20), st.lists(st.text(max_size=3), max_size=2))
    return st.integers(0, 9).flatmap(lambda roll: st.none() if roll < 5 else texts() if roll < 9 else other)


def check_summary(summary: Summary, source, chosen) -> None:
    """The invariants every Summary keeps."""
    assert isinstance(summary, Summary)
    paging, limits, generation = chosen.units, chosen.limits, chosen.generation
    documents = [d.decode("utf-8") if isinstance(d, bytes) else d for d in
                 ([source] if isinstance(source, (str, bytes)) else source)]
    assert summary.units
    for unit in summary.units:
        assert unit.text == documents[unit.document][unit.start : unit.end]
        assert len(unit.token_ids) <= getattr(paging, type(paging).UNIT_TOKENS)
    if summary.kind == "dyle":  # the extractor's top_k, each with its finite score
        assert len(summary.units) <= paging.top_k and all(math.isfinite(u.score) for u in summary.units)
    if summary.kind == "hiersumm":  # the ranker's best, best first
        scores = [u.score for u in summary.units]
        assert len(scores) <= paging.top_paragraphs and scores == sorted(scores, reverse=True)
    assert sum(len(u.text_ids) for u in summary.units) <= limits.max_tokens
    steps = len(summary.token_ids)
    assert 1 <= steps <= generation.max_length - 1
    assert summary.unit_weights.shape == (steps, len(summary.units))
    assert np.isfinite(summary.unit_weights).all() and (summary.unit_weights >= 0).all()
    assert np.allclose(summary.unit_weights.sum(axis=1), 1.0, atol=1e-4)
    assert math.isfinite(summary.score)
    assert isinstance(summary.text, str)


@pytest.fixture(scope="module", params=["pagesum", "hierencdec", "dyle", "hiersumm"])
def summarizer(request):
    """The tiny bundle of each kind."""
    bundle = request.getfixturevalue({"pagesum": "bundle_dir", "hierencdec": "hierencdec_bundle_dir",
                                      "dyle": "dyle_bundle_dir", "hiersumm": "hiersumm_bundle_dir"}[request.param])
    return Summarizer.from_pretrained(bundle, threads=1)


@given(source=inputs(), query=queries(), chosen=options())
def test_summarize(summarizer, source, query, chosen):
    try:
        summary = summarizer.summarize(source, query=query, **chosen)
    except LocsumError as err:
        event(f"refused: {type(err).__name__}")
        return
    event("summarized")
    check_summary(summary, source, summarizer.options(**chosen))


@given(sources=st.one_of(st.lists(inputs(), min_size=1, max_size=3), st.lists(inputs(), max_size=3), inputs()),
       query_list=st.one_of(st.none(), st.lists(queries(), max_size=3), st.text(max_size=3)), chosen=options())
def test_summarize_batch(summarizer, sources, query_list, chosen):
    if isinstance(query_list, list) and isinstance(sources, list):
        query_list = (query_list + [None] * len(sources))[: len(sources) + (len(query_list) > len(sources))]
    try:
        summaries = summarizer.summarize_batch(sources, query_list, **chosen)
    except LocsumError as err:
        event(f"refused: {type(err).__name__}")
        return
    event("summarized")
    assert len(summaries) == len(sources)
    for summary, source in zip(summaries, sources):
        check_summary(summary, source, summarizer.options(**chosen))


@st.composite
def manifest_damage(draw, manifest: dict):
    """The manifest with one of: a key deleted, a top-level or nested value replaced, a key added."""
    damaged = json.loads(json.dumps(manifest))
    action = draw(st.sampled_from(["none", "delete", "replace", "nested", "add"]))
    keys = sorted(damaged)
    if action == "delete":
        del damaged[draw(st.sampled_from(keys))]
    elif action == "replace":
        damaged[draw(st.sampled_from(keys))] = draw(json_values())
    elif action == "nested" and any(isinstance(damaged[k], dict) and damaged[k] for k in keys):
        group = draw(st.sampled_from([k for k in keys if isinstance(damaged[k], dict) and damaged[k]]))
        inner = sorted(damaged[group])
        damaged[group][draw(st.sampled_from(inner))] = draw(json_values())
    elif action == "add":
        damaged[draw(st.text(min_size=1, max_size=8))] = draw(json_values())
    return damaged


@pytest.fixture(scope="module")
def loose_bundle(bundle_dir, tmp_path_factory):
    """A copy of the bundle whose manifest and files each case may overwrite."""
    return shutil.copytree(bundle_dir, tmp_path_factory.mktemp("loose") / "bundle")


@given(data=st.data())
def test_from_pretrained(bundle_dir, loose_bundle, data):
    manifest = json.loads((bundle_dir / C.MANIFEST_FILE).read_text())
    for name in (C.MANIFEST_FILE, C.TOKENIZER_FILE, C.DECODER_FILE):
        shutil.copyfile(bundle_dir / name, loose_bundle / name)
    damage = data.draw(st.sampled_from(["manifest", "manifest", "bytes", "file", "none"]))
    if damage == "manifest":
        (loose_bundle / C.MANIFEST_FILE).write_text(json.dumps(data.draw(manifest_damage(manifest))))
    elif damage == "bytes":
        (loose_bundle / C.MANIFEST_FILE).write_bytes(data.draw(st.binary(max_size=64)))
    elif damage == "file":
        name = data.draw(st.sampled_from([C.TOKENIZER_FILE, C.DECODER_FILE]))
        (loose_bundle / name).write_bytes(data.draw(st.binary(max_size=64)))
    path = data.draw(st.one_of(st.just(loose_bundle), st.just(str(loose_bundle)), st.text(max_size=10),
                               st.just(loose_bundle / "absent"), st.integers(), st.none()))
    def mostly(valid, invalid):  # 9 in 10 valid
        return st.integers(0, 9).flatmap(lambda roll: valid if roll < 9 else invalid)

    arguments = data.draw(st.fixed_dictionaries({}, optional={
        "backend": mostly(st.sampled_from(["auto", "onnxruntime"]), st.just("tensorflow") | st.integers()),
        "threads": mostly(st.none() | st.integers(1, 3), st.integers(-2, 0) | st.floats() | st.text(max_size=2)),
        "unit_batch_size": mostly(st.integers(1, 5), st.integers(-1, 0) | st.floats() | st.text(max_size=2)),
        "verify": mostly(st.booleans(), st.integers(0, 1) | st.text(max_size=3)),
    }))
    if path is None:  # the default bundle: keep the case on the damaged copy
        path = loose_bundle
    try:
        summarizer = Summarizer.from_pretrained(path, **arguments)
    except LocsumError as err:
        event(f"refused: {type(err).__name__}")
        return
    event("loaded")
    check_summary(summarizer.summarize("The board met on Monday.", max_length=4), "The board met on Monday.",
                  summarizer.options(max_length=4))


def settings_paths(value, prefix=()) -> list[tuple]:
    """Every key path in a JSON object, nested objects included."""
    paths = []
    for key, inner in value.items():
        paths.append((*prefix, key))
        if isinstance(inner, dict):
            paths += settings_paths(inner, (*prefix, key))
    return paths


@pytest.fixture(scope="module")
def kind_bundles(bundle_dir, dyle_bundle_dir, hierencdec_bundle_dir, hiersumm_bundle_dir, tmp_path_factory):
    """(the bundle, a copy whose manifest each case overwrites) of every kind."""
    return {path.name: (path, shutil.copytree(path, tmp_path_factory.mktemp("settings") / path.name))
            for path in (bundle_dir, dyle_bundle_dir, hierencdec_bundle_dir, hiersumm_bundle_dir)}


def same_json_type(value, original) -> bool:
    """Whether `value` has the type of `original` as JSON writes it: an integer is a float setting's value too (JSON
    has one number type: 1 for 1.0), a float is not an integer setting's."""
    if type(original) is float and type(value) is int:
        return True
    return type(value) is type(original)


@given(data=st.data())
def test_a_manifest_missing_or_mistyping_any_setting_is_a_bundle_error(kind_bundles, data):
    source, copy = kind_bundles[data.draw(st.sampled_from(sorted(kind_bundles)))]
    manifest = json.loads((source / C.MANIFEST_FILE).read_text())
    path = data.draw(st.sampled_from(settings_paths(manifest)))
    holder = manifest
    for key in path[:-1]:
        holder = holder[key]
    deleted, original = data.draw(st.booleans()), holder[path[-1]]
    if deleted:
        del holder[path[-1]]
    else:
        holder[path[-1]] = data.draw(json_values().filter(lambda value: not same_json_type(value, original)))
    (copy / C.MANIFEST_FILE).write_text(json.dumps(manifest))
    try:
        summarizer = Summarizer.from_pretrained(copy)
    except BundleError as err:
        event(f"refused: {path[0]}")
        assert path[-1] in str(err) or path[0] in str(err), (path, str(err))  # names the setting or its group
        return
    # what may be left out: an option (its default applies), a record that is not a setting, an optional section
    optional = {"units", "limits", "generation", "files", "producer", "tensorrt", "base", "packed", "dtype",
                "format_version"}
    parity = len(path) == 3 and path[0] == "graphs" and path[2] in ("max_abs_diff", "int8_max_abs_diff")
    added = ".".join(path) in ADDED_SETTINGS  # a setting newer than the manifest: its default is what was exported
    # or a setting that was None (unset) given a value its option accepts: memory_limit=1.0 is one byte
    assert (deleted and (path[0] in optional or parity or added)) or (not deleted and original is None), path
    event(f"loaded without {path[0]}")
    try:
        summarizer.summarize("The board met on Monday.", max_length=4, num_beams=1)
    except LocsumError:
        pass


@st.composite
def data_lines(draw) -> bytes:
    valid = {"id": "x", "documents": [draw(texts())], "query": None, "summary": "The board met."}
    line = draw(st.sampled_from(["valid", "valid", "json", "bytes", "empty"]))
    if line == "valid":
        return json.dumps(valid).encode()
    if line == "json":
        return json.dumps(draw(manifest_damage(valid))).encode()
    if line == "bytes":
        return draw(st.binary(max_size=40)).replace(b"\n", b" ")
    return b""


def cli_options():
    wrong = st.one_of(st.integers(-3, 1).map(str), st.sampled_from(["nan", "inf", "2.5", "x", "1e99", ""]))
    numbers = st.integers(0, 5).flatmap(lambda roll: st.integers(2, 40).map(str) if roll < 4 else wrong)
    return st.lists(st.sampled_from([
        ("--num-beams", numbers), ("--max-length", numbers), ("--min-length", numbers), ("--page-tokens", numbers),
        ("--max-tokens", numbers), ("--length-penalty", numbers), ("--end-penalty", numbers),
        ("--select", st.sampled_from(["first", "tfidf", "x"])),
        ("--memory-limit", st.sampled_from(["1KB", "4GB", "x", "-3"])), ("--truncate", None), ("--no-truncate", None),
        ("--whole-sentences", None), ("--no-ngram-word-starts", None), ("--threads", numbers),
        ("--policy", st.sampled_from(["spatial", "document", "x"])),
    ]), unique_by=lambda flag: flag[0], max_size=4)


def draw_flags(data, flags) -> list[str]:
    argv = []
    for flag, value in flags:
        argv += [flag] + ([data.draw(value)] if value is not None else [])
    return argv


def run_cli(argv: list[str]) -> int:
    """`locsum ARGV` in this process: its exit code; argparse's own usage errors exit 2 too."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


@given(data=st.data())
def test_cli_summarize_and_eval(bundle_dir, tmp_path_factory, data):
    directory = tmp_path_factory.mktemp("cli")
    command = data.draw(st.sampled_from(["summarize", "eval"]))
    if command == "summarize":
        files = []
        for i in range(data.draw(st.integers(0, 2))):
            files.append(directory / f"doc{i}.txt")
            files[-1].write_bytes(data.draw(texts()).encode("utf-8", "surrogatepass"))
        argv = ["summarize", *map(str, files), "--bundle", str(bundle_dir)]
        argv += data.draw(st.sampled_from([[], ["--json"], ["--query", "What was decided?"], ["--query", ""]]))
    else:
        lines = data.draw(st.lists(data_lines(), max_size=3))
        (directory / "data.jsonl").write_bytes(b"\n".join(lines))
        argv = ["eval", "--data", str(directory / "data.jsonl"), "--quiet", "--output", str(directory / "o.jsonl")]
        argv += data.draw(st.sampled_from([["--bundle", str(bundle_dir)], []]))
        argv += data.draw(st.sampled_from([[], ["--limit", "0"], ["--limit", "-1"], ["--limit", "2"],
                                           ["--baselines", "lead,x"], ["--baselines", "oracle"]]))
    argv += draw_flags(data, data.draw(cli_options()))
    code = run_cli(argv)
    event(f"{command} exit {code}")
    assert code in (0, 2)


@given(data=st.data())
def test_cli_bench_and_profile(bundle_dir, monkeypatch, data):
    from locsum_sdk import profiling

    monkeypatch.setattr(profiling, "measure_in_fresh_process", profiling.measure)  # same code, no fork
    command = data.draw(st.sampled_from(["bench", "profile"]))
    tokens = data.draw(st.one_of(st.integers(-5, 600).map(str), st.sampled_from(
        ["nan", "inf", "-1k", "1e99", "0.5k", "100,200", "", ",", "x", "3e7", "16777217"])))
    argv = [command, "--bundle", str(bundle_dir), "--tokens", tokens, "--steps",
            data.draw(st.sampled_from(["-1", "0", "1", "3", "200", "x"])),
            "--num-beams", data.draw(st.sampled_from(["-1", "1", "2", "100"]))]
    argv += data.draw(st.sampled_from([[], ["--json"], ["--threads", "0"], ["--threads", "1"]]))
    code = run_cli(argv)
    event(f"{command} exit {code}")
    assert code in (0, 2)


@st.composite
def checkpoints(draw, source: Path, root: Path) -> Path:
    """A copy of the tiny checkpoint, its config.json intact or damaged, its weights intact or not."""
    target = root / f"ckpt{draw(st.integers(0, 10**9))}"
    shutil.copytree(source, target)
    config = json.loads((source / "config.json").read_text())
    damage = draw(st.sampled_from(["none", "config", "bytes", "weights", "missing"]))
    if damage == "config":
        (target / "config.json").write_text(json.dumps(draw(manifest_damage(config))))
    elif damage == "bytes":
        (target / "config.json").write_bytes(draw(st.binary(max_size=40)))
    elif damage == "weights":
        (target / "model.safetensors").write_bytes(draw(st.binary(max_size=64)))
    elif damage == "missing":
        (target / "config.json").unlink()
    return target


@given(data=st.data())
def test_cli_export(checkpoint_dir, tmp_path_factory, data):
    root = tmp_path_factory.mktemp("export")
    checkpoint = data.draw(checkpoints(checkpoint_dir, root))
    output = root / "bundle"
    if data.draw(st.booleans()):
        output.mkdir()  # refused without --force
    argv = ["export", "--checkpoint", str(checkpoint), "--output", str(output)]
    argv += data.draw(st.sampled_from([[], ["--force"], ["--quantize", "fp8"], ["--kind", "dyle"],
                                       ["--kind", "hiersumm"], ["--kind", "summit"]]))
    argv += draw_flags(data, [f for f in data.draw(cli_options()) if f[0] not in ("--threads",)])
    code = run_cli(argv)
    event(f"export exit {code}")
    assert code in (0, 2)
    if code == 0:
        summarizer = Summarizer.from_pretrained(output)  # what export wrote loads
        try:
            check_summary(summarizer.summarize("The board met.", max_length=3), "The board met.",
                          summarizer.options(max_length=3))
        except LocsumError:  # the defaults given to export may refuse this input (a tiny memory_limit)
            pass
    assert not [p for p in root.iterdir() if ".staging-" in p.name]  # no partial export left behind



@given(data=st.data())
def test_set_defaults(bundle_dir, tmp_path_factory, data):
    from locsum_sdk.exporters.defaults import set_defaults

    root = tmp_path_factory.mktemp("defaults")
    output = root / "copy"
    if data.draw(st.booleans()):
        argv = ["export", "--bundle", str(bundle_dir), "--output", str(output)]
        argv += draw_flags(data, [f for f in data.draw(cli_options()) if f[0] != "--threads"])
        code = run_cli(argv)
        assert code in (0, 2)
        written = code == 0
    else:
        chosen = data.draw(options())
        try:
            set_defaults(bundle_dir, output, chosen)
            written = True
        except LocsumError:
            written = False
    event(f"set_defaults written {written}")
    if written:
        summarizer = Summarizer.from_pretrained(output)  # what it wrote loads
        try:
            check_summary(summarizer.summarize("The board met.", max_length=3), "The board met.",
                          summarizer.options(max_length=3))
        except LocsumError:  # the new defaults may refuse this input (a tiny max_tokens)
            pass
    else:
        assert not output.exists()
    assert not [p for p in root.iterdir() if ".staging-" in p.name]

@pytest.mark.slow
def test_wheel_carries_the_default_bundle(tmp_path):
    import subprocess
    import sys
    import zipfile

    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(root)], check=True,
                   capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"locsum_sdk/engines/default/{p.name}" for p in (root / "engines" / "default").iterdir()}
    assert shipped <= names
