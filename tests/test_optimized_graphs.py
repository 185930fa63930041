"""ONNX Runtime's optimized graphs kept in a bundle's cache directory (`backends/optimized_graphs.py`): written at the
first load, read with the optimizers off at the next, the same tokens either way; written again when stale or
damaged; a cache that cannot be written, or a bundle read from where it lies, loads as before."""

import logging
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from locsum_sdk import Summarizer
from locsum_sdk.backends import optimized_graphs
from locsum_sdk.backends.optimized_graphs import GRAPHS_DIR, STAMP_FILE
from locsum_sdk.errors import OptionError

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "engines" / "pagesum"  # packed: read from the cache
TEXT = ("The council met on Monday. It approved the budget for the roof and the new library wing. The vote was "
        "close, and the mayor asked for a second survey before the work starts in spring. ") * 6
OPTIONS = {"num_beams": 2, "max_length": 24}


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def built(monkeypatch):
    """Each session built: (the graph file it read, its optimization level)."""
    made = []
    original = ort.InferenceSession

    def recording(path, options=None, *args, **kwargs):
        made.append((Path(path), options.graph_optimization_level))
        return original(path, options, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", recording)
    return made


def kept(summarizer: Summarizer) -> list[Path]:
    return sorted((summarizer.backend.bundle.graph_path / GRAPHS_DIR).iterdir())


def test_the_first_load_keeps_the_optimized_graphs_and_the_next_reads_them_with_the_same_tokens(cache, built):
    first = Summarizer.from_pretrained(SHIPPED, threads=1)
    directories = kept(first)
    assert [d.name.split("-")[0] for d in directories] == ["decoder", "encoder"]
    for directory in directories:
        graph = directory.name.split("-")[0]
        assert {p.name for p in directory.iterdir()} == {f"{graph}.onnx", f"{graph}.bin", STAMP_FILE}
    assert all(level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL for _, level in built)
    built.clear()
    again = Summarizer.from_pretrained(SHIPPED, threads=1)
    assert sorted(path.parent for path, _ in built) == directories
    assert all(level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL for _, level in built)
    want, got = first.summarize(TEXT, **OPTIONS), again.summarize(TEXT, **OPTIONS)
    assert got.token_ids == want.token_ids and np.array_equal(got.unit_weights, want.unit_weights)


def prepacked(directory: Path) -> int:
    """How many of a kept graph's weights are also kept as the kernels pre-pack them."""
    import onnx

    graph = onnx.load(next(directory.glob("*.onnx")), load_external_data=False).graph
    return sum(any(entry.key.startswith("prepacked") for entry in weight.external_data) for weight in graph.initializer)


def test_the_kept_graphs_hold_their_weights_prepacked_and_read_the_same_either_way(cache, monkeypatch):
    packed = Summarizer.from_pretrained(SHIPPED, threads=1)
    assert all(prepacked(directory) > 0 for directory in kept(packed))
    monkeypatch.setattr(optimized_graphs, "PREPACKED", False)  # another form: kept beside, under another key
    plain = Summarizer.from_pretrained(SHIPPED, threads=1)
    directories = kept(plain)
    assert len(directories) == 4 and sorted(prepacked(d) > 0 for d in directories) == [False, False, True, True]
    monkeypatch.setattr(optimized_graphs, "PREPACKED", True)
    again = Summarizer.from_pretrained(SHIPPED, threads=1)  # reads the pre-packed weights from the kept file
    want = plain.summarize(TEXT, **OPTIONS)
    for got in (packed.summarize(TEXT, **OPTIONS), again.summarize(TEXT, **OPTIONS)):
        assert got.token_ids == want.token_ids and np.array_equal(got.unit_weights, want.unit_weights)


def test_a_graphs_directories_under_other_keys_go_once_unused(cache, monkeypatch):
    """Another ONNX Runtime's or form's kept graphs that no load read for UNUSED_DAYS are removed at a load, which
    marks its own as read; those read lately, and one without its stamp (being written), stay."""
    first = kept(Summarizer.from_pretrained(SHIPPED, threads=1))
    old = os.path.getmtime(first[0] / STAMP_FILE) - (optimized_graphs.UNUSED_DAYS + 1) * 86_400
    for directory in first:
        os.utime(directory / STAMP_FILE, (old, old))
    Summarizer.from_pretrained(SHIPPED, threads=1)  # read: marked as used now
    assert all(os.path.getmtime(d / STAMP_FILE) > old + 86_400 for d in first)
    stale, unstamped = first[0].with_name("decoder-0000000000000000"), first[0].with_name("decoder-1111111111111111")
    shutil.copytree(first[0], stale)
    os.utime(stale / STAMP_FILE, (old, old))
    unstamped.mkdir()
    assert set(kept(Summarizer.from_pretrained(SHIPPED, threads=1))) == {*first, unstamped}
    for directory in first:  # the prepacked form unused for as long: another form's load removes it
        os.utime(directory / STAMP_FILE, (old, old))
    monkeypatch.setattr(optimized_graphs, "PREPACKED", False)
    now = kept(Summarizer.from_pretrained(SHIPPED, threads=1))
    assert len(now) == 3 and unstamped in now and not set(first) & set(now)


def test_a_damaged_or_stale_optimized_graph_is_written_again(cache, built, caplog):
    caplog.set_level(logging.WARNING, logger="locsum_sdk")
    want = Summarizer.from_pretrained(SHIPPED, threads=1).summarize(TEXT, **OPTIONS).token_ids
    decoder, encoder = kept(Summarizer.from_pretrained(SHIPPED, threads=1))
    (decoder / "decoder.onnx").write_bytes(b"not a graph")
    (encoder / STAMP_FILE).write_text("[]")  # optimized from other files
    built.clear()
    summarizer = Summarizer.from_pretrained(SHIPPED, threads=1)
    assert "did not load" in caplog.text
    assert [level for _, level in built].count(ort.GraphOptimizationLevel.ORT_ENABLE_ALL) == 2
    assert summarizer.summarize(TEXT, **OPTIONS).token_ids == want
    assert kept(summarizer) == [decoder, encoder] and (decoder / "decoder.onnx").stat().st_size > 1000
    built.clear()
    Summarizer.from_pretrained(SHIPPED, threads=1)
    assert all(level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL for _, level in built)


def test_a_cache_that_cannot_be_written_loads_as_before(cache, monkeypatch):
    want = Summarizer.from_pretrained(SHIPPED, threads=1).summarize(TEXT, **OPTIONS).token_ids
    summarizer = Summarizer.from_pretrained(SHIPPED, threads=1)
    shutil.rmtree(summarizer.backend.bundle.graph_path / GRAPHS_DIR)
    (summarizer.backend.bundle.graph_path / GRAPHS_DIR).write_text("a file where the directory would be")
    assert Summarizer.from_pretrained(SHIPPED, threads=1).summarize(TEXT, **OPTIONS).token_ids == want


def test_loads_at_once_each_get_a_session_and_one_directory_a_graph_stays(cache):
    summaries, errors = [], []

    def load():
        try:
            summaries.append(Summarizer.from_pretrained(SHIPPED, threads=1).summarize(TEXT, **OPTIONS).token_ids)
        except Exception as err:  # noqa: BLE001  (reported by the assertion below)
            errors.append(err)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(summaries) == 3 and summaries.count(summaries[0]) == 3
    graphs = Summarizer.from_pretrained(SHIPPED, threads=1).backend.bundle.graph_path / GRAPHS_DIR
    assert sorted(p.name.split("-")[0] for p in graphs.iterdir()) == ["decoder", "encoder"]  # no partial left


def test_a_bundle_read_from_where_it_lies_is_not_copied(cache, bundle_dir):
    summarizer = Summarizer.from_pretrained(bundle_dir, threads=1)
    assert summarizer.backend.bundle.graph_path is None
    assert optimized_graphs.directory(ort, summarizer.backend.bundle, "decoder") is None
    assert not (cache / "cache").exists()


def test_locsum_keep_graphs_0_optimizes_at_every_load_and_keeps_nothing(cache, built, monkeypatch):
    want = Summarizer.from_pretrained(SHIPPED, threads=1).summarize(TEXT, **OPTIONS).token_ids
    graphs = Summarizer.from_pretrained(SHIPPED, threads=1).backend.bundle.graph_path / GRAPHS_DIR
    shutil.rmtree(graphs)
    built.clear()
    monkeypatch.setenv("LOCSUM_KEEP_GRAPHS", "0")
    for _ in range(2):
        assert Summarizer.from_pretrained(SHIPPED, threads=1).summarize(TEXT, **OPTIONS).token_ids == want
    assert not graphs.exists()
    assert len(built) == 4 and all(level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL for _, level in built)
    assert all(path.parent != graphs and GRAPHS_DIR not in path.parts for path, _ in built)  # the bundle's own graphs


@pytest.mark.parametrize("value", ["no", "2", "true"])
def test_locsum_keep_graphs_takes_0_or_1_only(cache, monkeypatch, value):
    monkeypatch.setenv("LOCSUM_KEEP_GRAPHS", value)
    with pytest.raises(OptionError, match=r"LOCSUM_KEEP_GRAPHS='.*' is not accepted; set it to 0"):
        Summarizer.from_pretrained(SHIPPED, threads=1)
