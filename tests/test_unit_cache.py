"""The unit cache and `LiveDocument`: a text summarized again after it grew encodes only its new or changed units
and gives the tokens a cold run gives; the cache stays within its bytes; the live API refuses bad input by type."""

import random

import numpy as np
import pytest
from conftest import document
from hypothesis import given
from hypothesis import strategies as st

from locsum_sdk import LiveDocument, Summarizer, UnitCache
from locsum_sdk.errors import EmptyInputError, EncodingError, LocsumError, OptionError

OPTIONS = {"num_beams": 2, "max_length": 12}


def text_of(sentences: int, seed: int = 3) -> str:
    return document(random.Random(seed), sentences)


def same(summary, cold) -> None:
    """Token-exact, same units; unit weights within float32 noise (cached units were encoded in other batches)."""
    assert summary.token_ids == cold.token_ids
    assert [u.token_ids for u in summary.units] == [u.token_ids for u in cold.units]
    np.testing.assert_allclose(summary.unit_weights, cold.unit_weights, atol=1e-5)


def test_the_cache_is_lru_within_its_bytes():
    cache = UnitCache(max_bytes=3 * 400)
    arrays = {i: {"k": np.full((10, 10), i, np.float32)} for i in range(5)}  # 400 bytes each
    keys = {i: UnitCache.key("model", [i, 1, 2]) for i in range(5)}
    for i in range(3):
        cache.put(keys[i], arrays[i])
    assert cache.get(keys[0]) is not None  # 0 is now the most recent: 1 goes first
    cache.put(keys[3], arrays[3])
    assert cache.get(keys[1]) is None and cache.get(keys[2]) is not None
    stats = cache.stats
    assert (stats.entries, stats.bytes, stats.evictions, stats.hits, stats.misses) == (3, 1200, 1, 2, 1)
    cache.put(keys[4], {"k": np.zeros((100, 100), np.float32)})  # larger than the whole cache: not stored
    assert cache.get(keys[4]) is None and cache.stats.bytes == 1200
    stored = cache.get(keys[3])["k"]
    assert not stored.flags.writeable and np.array_equal(stored, arrays[3]["k"])
    arrays[3]["k"][...] = -1  # the cache holds copies
    assert cache.get(keys[3])["k"][0, 0] == 3
    assert UnitCache.key("model", [1, 2]) != UnitCache.key("other model", [1, 2])
    cache.clear()
    assert cache.stats == type(cache.stats)(0, 0, 0, 0, 0, 1200)


@pytest.mark.parametrize("max_bytes", [0, -5, 1.5, "1GB", True, None])
def test_a_cache_of_no_bytes_is_refused(max_bytes):
    with pytest.raises(OptionError, match="max_bytes"):
        UnitCache(max_bytes=max_bytes)


def test_a_cache_that_is_not_one_is_refused(bundle_dir):
    with pytest.raises(OptionError, match="unit_cache"):
        Summarizer.from_pretrained(bundle_dir, unit_cache={})


@pytest.fixture(params=["onnxruntime", "torch"])
def loaded(request, bundle_dir, checkpoint_dir):
    """The tiny PageSum on each backend that can read a cache: (with a cache, without one)."""
    path = bundle_dir if request.param == "onnxruntime" else checkpoint_dir
    cached = Summarizer.from_pretrained(path, backend=request.param, unit_cache=UnitCache())
    return cached, Summarizer.from_pretrained(path, backend=request.param)


def test_a_grown_text_encodes_only_its_new_and_changed_pages(loaded):
    cached, cold = loaded
    options = cold.options(policy="document", **OPTIONS)  # pages filled in order: appending moves the last one
    text = text_of(40)
    first = cached.summarize(text, options=options)
    same(first, cold.summarize(text, options=options))
    seen = cached.unit_cache.stats
    assert seen.hits == 0 and seen.misses == seen.entries == len(first.units) > 3
    again = cached.summarize(text, options=options)
    assert again.token_ids == first.token_ids and cached.unit_cache.stats.misses == seen.misses
    grown = text + " " + text_of(12, seed=4)
    summary = cached.summarize(grown, options=options)
    same(summary, cold.summarize(grown, options=options))
    stats = cached.unit_cache.stats
    new = len(summary.units) - len(first.units)
    assert stats.misses - seen.misses == new + 1  # the new pages and the last old one, which the text reached
    assert stats.hits - seen.hits == 2 * len(first.units) - 1


def test_a_batch_reads_and_fills_one_cache(loaded):
    cached, cold = loaded
    texts = [text_of(30, seed) for seed in range(3)]
    cached.summarize(texts[0], **OPTIONS)
    summaries = cached.summarize_batch(texts + [texts[0]], **OPTIONS)
    for summary, cold_summary in zip(summaries, cold.summarize_batch(texts + [texts[0]], **OPTIONS)):
        same(summary, cold_summary)


def test_the_cache_stays_within_its_bytes_and_the_summary_stays_exact(bundle_dir):
    cold = Summarizer.from_pretrained(bundle_dir)
    text = text_of(60)
    units = len(cold.summarize(text, **OPTIONS).units)
    cache = UnitCache(max_bytes=200_000)  # a few of the tiny model's pages, fewer than the text has
    cached = Summarizer.from_pretrained(bundle_dir, unit_cache=cache)
    for _ in range(2):
        same(cached.summarize(text, **OPTIONS), cold.summarize(text, **OPTIONS))
        assert 0 < cache.stats.bytes <= 200_000 and cache.stats.entries < units
    assert cache.stats.evictions > 0


def test_dyle_snippets_come_from_the_cache(dyle_bundle_dir):
    cached = Summarizer.from_pretrained(dyle_bundle_dir, unit_cache=UnitCache())
    cold = Summarizer.from_pretrained(dyle_bundle_dir)
    text = text_of(40)
    same(cached.summarize(text, top_k=6, **OPTIONS), cold.summarize(text, top_k=6, **OPTIONS))
    grown = text + " " + text_of(8, seed=5)
    misses = cached.unit_cache.stats.misses
    same(cached.summarize(grown, top_k=6, **OPTIONS), cold.summarize(grown, top_k=6, **OPTIONS))
    assert cached.unit_cache.stats.hits > 0 and cached.unit_cache.stats.misses - misses < 6


def counting(run, names: list):
    """`run` (a backend's), recording the name of every graph it runs in `names`."""

    def counted(graph, inputs):
        names.append(graph)
        return run(graph, inputs)

    return counted


def test_selection_runs_whose_inputs_did_not_change_are_not_run_again(dyle_bundle_dir, hiersumm_bundle_dir,
                                                                       monkeypatch, caplog):
    """The tiny DYLE's extractor reads no tf-idf feature: after text is appended only its last runs change. The
    Hierarchical Transformer's encoder cannot be served (it warns), its ranker's runs can."""
    for path, unit_options in ((dyle_bundle_dir, {"top_k": 6}), (hiersumm_bundle_dir, {})):
        with caplog.at_level("WARNING", logger="locsum_sdk"):
            cached = Summarizer.from_pretrained(path, unit_cache=UnitCache())
        cold = Summarizer.from_pretrained(path)
        graph = cached.kind.selection.graph
        runs = []
        monkeypatch.setattr(cached.backend, "run", counting(cached.backend.run, runs))
        text = text_of(60)
        first = cached.summarize(text, **unit_options, **OPTIONS)
        same(first, cold.summarize(text, **unit_options, **OPTIONS))
        cold_runs = runs.count(graph)
        runs.clear()
        grown = text + " " + text_of(3, seed=6)
        same(cached.summarize(grown, **unit_options, **OPTIONS), cold.summarize(grown, **unit_options, **OPTIONS))
        assert cold_runs > 2 and runs.count(graph) <= 2, (path.name, cold_runs, runs.count(graph))
    assert "cannot serve its encoder" in caplog.text and "keeps its ranker runs only" in caplog.text


def test_kinds_that_encode_units_together_warn_and_encode_all(hierencdec_bundle_dir, caplog):
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        cached = Summarizer.from_pretrained(hierencdec_bundle_dir, unit_cache=UnitCache())
    assert "cannot serve" in caplog.text and "runs only" not in caplog.text
    cold = Summarizer.from_pretrained(hierencdec_bundle_dir)
    text = [text_of(10, seed) for seed in range(3)]
    same(cached.summarize(text, **OPTIONS), cold.summarize(text, **OPTIONS))
    assert cached.unit_cache.stats.entries == 0


def test_a_live_document_gives_the_cold_summary_of_its_text(bundle_dir):
    summarizer = Summarizer.from_pretrained(bundle_dir)
    live = LiveDocument(summarizer, **OPTIONS)
    assert live.options.units.policy == "document"  # PageSum's pages fill in order for a growing text
    assert summarizer.unit_cache is None and live.cache is not summarizer.unit_cache
    with pytest.raises(EmptyInputError):
        live.summary()
    text = text_of(80)
    for part in np.array_split(np.arange(len(text)), 4):
        live.append(text[part[0] : part[-1] + 1])
        summary = live.summary()
        assert live.summary() is summary  # unchanged text: not summarized again
        same(summary, summarizer.summarize(live.text, live.query, live.options))
    assert live.text == text and live.cache.stats.hits > 0
    live.replace(text[: len(text) // 2])
    hits = live.cache.stats.hits
    same(live.summary(), summarizer.summarize(live.text, None, live.options))
    assert live.cache.stats.hits > hits


def test_live_bytes_may_end_inside_a_character(bundle_dir):
    live = LiveDocument(Summarizer.from_pretrained(bundle_dir), query="Was the café's budget agreed?")
    data = "Zoë met the café owners. Budget agreed at 30 €. ".encode() * 3
    for i in range(0, len(data), 5):
        live.append(data[i : i + 5])
    assert live.text == data.decode()
    with pytest.raises(EncodingError, match="not valid UTF-8"):
        live.append(b"\xff\xfe more")
    assert live.text == data.decode()
    assert live.summary().text == live.summarizer.summarize(live.text, live.query, live.options).text


def test_a_live_cluster_grows_by_documents(bundle_dir, hierencdec_bundle_dir):
    summarizer = Summarizer.from_pretrained(bundle_dir)
    live = LiveDocument(summarizer, **OPTIONS)
    articles = [text_of(20, seed) for seed in range(4)]
    live.add_document(articles[0])  # the first, still empty, document takes it
    for article in articles[1:]:
        live.add_document(article[:40])
        live.append(article[40:].encode())
        summary = live.summary()
        same(summary, summarizer.summarize(live.documents, None, live.options))
    assert live.documents == articles and live.text == "\n\n".join(articles)
    assert {u.document for u in summary.units} == {0, 1, 2, 3}
    assert live.cache.stats.hits > 0
    live.append("Zoë".encode()[:-1])
    with pytest.raises(EncodingError, match="inside a UTF-8 character"):
        live.add_document("next")
    live.replace([articles[2], articles[0].encode()])
    same(live.summary(), summarizer.summarize([articles[2], articles[0]], None, live.options))
    live.add_document("   ")
    with pytest.raises(EmptyInputError, match="document 2"):
        live.summary()
    with pytest.raises(LocsumError):
        live.replace([])
    with pytest.raises(EncodingError, match="document 1"):
        live.replace(["fine", b"\xff"])
    assert live.documents == [articles[2], articles[0], "   "]  # unchanged
    documents = LiveDocument(Summarizer.from_pretrained(hierencdec_bundle_dir), articles[0], **OPTIONS)
    documents.add_document(articles[1])
    assert documents.summary().units[-1].document == 1


def test_live_options_are_checked_at_once(bundle_dir):
    summarizer = Summarizer.from_pretrained(bundle_dir)
    with pytest.raises(OptionError, match="num_beam"):
        LiveDocument(summarizer, num_beam=2)
    with pytest.raises(LocsumError, match="query"):
        LiveDocument(summarizer, query=5)
    with pytest.raises(LocsumError, match="summarizer"):
        LiveDocument("engines/pagesum")
    assert LiveDocument(summarizer, policy="spatial").options.units.policy == "spatial"


@given(st.lists(st.tuples(st.sampled_from(["append", "add_document", "replace"]),
                          st.one_of(st.text(max_size=30), st.binary(max_size=12), st.integers(), st.none(),
                                    st.lists(st.one_of(st.text(max_size=5), st.binary(max_size=4)), max_size=2))),
                max_size=6))
def test_hostile_appends_raise_typed_errors_only(bundle_dir, parts):
    live = LiveDocument(_summarizer(bundle_dir), max_length=4, num_beams=1)
    for method, part in parts:
        try:
            getattr(live, method)(part)
        except LocsumError:
            pass
    try:
        live.summary()
    except LocsumError:
        pass


_LOADED: dict = {}


def _summarizer(path) -> Summarizer:
    if path not in _LOADED:
        _LOADED[path] = Summarizer.from_pretrained(path)
    return _LOADED[path]
