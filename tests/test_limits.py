"""Input limits: max_tokens, the memory estimate and limit, truncation that keeps the first or the best pages."""

import logging

import numpy as np
import pytest

from locsum_sdk import Summarizer, kinds
from locsum_sdk.errors import InputTooLongError, MemoryLimitError, OptionError
from locsum_sdk.limits import LimitOptions, tfidf_cosine, tfidf_feature, tfidf_scores
from locsum_sdk.memory import available_memory, estimate_memory, memory_limit, parse_size, physical_memory, size_text
from locsum_sdk.units import Unit

TOPICS = {
    "budget": "The budget for the roof repair was discussed at length. Costs rose by ten percent this quarter. ",
    "library": "The library will open a pop-up branch in the school. Students asked for longer hours. ",
    "energy": "Energy use of the building fell after the new heating system. The network of sensors helped. ",
}


@pytest.fixture(scope="module")
def summarizer(bundle_dir):
    return Summarizer.from_pretrained(bundle_dir, threads=1)


def topical_text(repeats: int = 6) -> str:
    return "\n".join(TOPICS[name] * repeats for name in ("budget", "library", "energy", "budget"))


def test_select_tfidf_keeps_the_pages_closest_to_the_query_in_order(summarizer, caplog):
    text = topical_text()
    with caplog.at_level(logging.WARNING, logger="locsum_sdk"):
        summary = summarizer.summarize(text, query="When will the library branch open for students?",
                                       truncate=True, select="tfidf", max_tokens=150, max_length=4, page_tokens=128)
    assert "truncated" in caplog.text
    assert summary.units and all("library" in u.text.lower() for u in summary.units)
    assert [u.start for u in summary.units] == sorted(u.start for u in summary.units)
    first = summarizer.summarize(text, truncate=True, max_tokens=150, max_length=4)
    assert first.units[0].start == 0 and "budget" in first.units[0].text


def test_tfidf_without_a_query_scores_against_the_whole_input():
    units = [Unit(0, 0, 0, "", (0, *ids, 2)) for ids in ([5, 6, 7], [5, 6, 8], [9, 10, 11])]
    scores = tfidf_scores(units, [])
    assert scores[2] < min(scores[:2])  # the odd page out is the least central
    assert tfidf_scores(units, [9, 10]).argmax() == 2


def test_memory_limit_refuses_with_the_estimate_and_what_to_do(summarizer):
    with pytest.raises(MemoryLimitError) as err:
        summarizer.summarize(topical_text(20), memory_limit="2MB", page_tokens=32)
    message = str(err.value)
    for part in ("needs about", "cross", "memory limit of 2 MB", "truncate=True", "num_beams", "memory_limit"):
        assert part in message


def test_memory_limit_with_truncate_keeps_the_pages_that_fit(summarizer, caplog):
    text = topical_text(20)
    full = summarizer.summarize(text, page_tokens=32, max_length=4)
    half = [full.units[: len(full.units) // 2]]
    limit = summarizer.estimate_memory(half, summarizer.options(max_length=4).generation)
    with caplog.at_level(logging.WARNING, logger="locsum_sdk"):
        kept = summarizer.summarize(text, page_tokens=32, max_length=4, truncate=True, memory_limit=limit.total)
    assert "fit memory" in caplog.text
    assert 0 < len(kept.units) < len(full.units)
    assert [u.start for u in kept.units] == [u.start for u in full.units[: len(kept.units)]]
    assert kept.warnings == [f"truncated to fit the memory limit: kept {len(kept.units)} of {len(full.units)} pages "
                             f"({sum(len(u.text_ids) for u in kept.units)} of "
                             f"{sum(len(u.text_ids) for u in full.units)} tokens, select=first); raise memory_limit "
                             "or lower num_beams to read all of it"]
    assert full.warnings == []


def test_a_call_of_several_batches_is_estimated_and_checked_with_each_part_at_its_largest(summarizer, monkeypatch):
    """An input of full pages and one of twenty short ones decode in two batches (`shape_groups`); the arenas keep the
    first batch's encoder chunks through the second's decoding, so the call's estimate takes each part at its
    largest over the batches, and the memory limit is checked against that for the second batch, before the first
    batch runs."""
    from dataclasses import fields

    from locsum_sdk.summarizer import shape_groups

    generation = summarizer.options(max_length=4, num_beams=2).generation
    long_input, short_input = topical_text(2), ["The board met."] * 20
    options = {"page_tokens": 128, "max_length": 4, "min_length": 4, "num_beams": 2}
    units = [summarizer.summarize(text, **options).units for text in (long_input, short_input)]
    assert shape_groups(units) == [[0], [1]]
    alone = [summarizer.estimate_memory([u], generation) for u in units]
    both = summarizer.estimate_memory(units, generation)
    for part in fields(both):
        assert getattr(both, part.name) >= max(getattr(e, part.name) for e in alone)
    assert both.total > max(e.total for e in alone)
    started = []
    start = summarizer.backend.start
    monkeypatch.setattr(summarizer.backend, "start", lambda *args: started.append(args) or start(*args))
    for limit in (max(e.total for e in alone), both.total - 1):  # each batch fits alone, the call does not
        with pytest.raises(MemoryLimitError):
            summarizer.summarize_batch([long_input, short_input], memory_limit=limit, **options)
    assert started == []  # refused at its second batch before the first one ran
    assert len(summarizer.summarize_batch([long_input, short_input], memory_limit=both.total, **options)) == 2
    assert len(started) == 2


def test_memory_limit_too_small_for_one_page_is_refused_even_with_truncate(summarizer):
    with pytest.raises(MemoryLimitError, match="even one page"):
        summarizer.summarize(topical_text(), truncate=True, memory_limit="1KB")


def test_no_page_fits_max_tokens(summarizer):
    with pytest.raises(InputTooLongError, match="no page fits"):
        summarizer.summarize(topical_text(), truncate=True, max_tokens=1, page_tokens=64)


MODEL = dict(d_model=256, vocab_size=8192, decoder_layers=3, decoder_heads=4, encoder_heads=4, encoder_ffn_dim=1024,
             decoder_ffn_dim=1024)


@pytest.mark.parametrize("kind", ["pagesum", "dyle"])
def test_estimate_grows_linearly_with_the_pages(kind):
    layout = kinds.get(kind).layout
    sizes = [estimate_memory(MODEL, layout, 1, pages, 512, 4, 160, 4, pages * 512).total
             for pages in (16, 32, 64, 128)]
    steps = [b - a for a, b in zip(sizes, sizes[1:])]
    assert steps[1] == pytest.approx(2 * steps[0], rel=0.01) and steps[2] == pytest.approx(2 * steps[1], rel=0.01)
    one_beam = estimate_memory(MODEL, layout, 1, 64, 512, 1, 160, 4).total
    assert one_beam < estimate_memory(MODEL, layout, 1, 64, 512, 4, 160, 4).total


def test_hierencdec_estimate_grows_with_documents_squared_only_in_scalars_per_head():
    """Short documents: the encoder's <s> exchange is D x D scores per head, the rest is linear in documents."""
    layout = kinds.get("hierencdec").layout
    encoder = [layout.encoder_memory(MODEL, 1, docs, 12, 4) for docs in (1000, 2000, 4000)]
    quadratic = [3 * 4 * MODEL["encoder_heads"] * docs * docs for docs in (1000, 2000, 4000)]
    linear = [e - q for e, q in zip(encoder, quadratic)]
    assert linear[1] < 2.2 * linear[0] and linear[2] < 2.2 * linear[1]


def test_a_memory_limit_over_the_machine_is_accepted_with_a_warning(caplog):
    physical = physical_memory()
    if physical is None:
        pytest.skip("this system does not say how much memory it has")
    over = 2 * physical + 12345
    with caplog.at_level(logging.WARNING, logger="locsum_sdk"):
        assert memory_limit(over) == over
        assert memory_limit(over) == over  # warned once per limit
    warnings = [r.getMessage() for r in caplog.records if "over this machine" in r.getMessage()]
    assert len(warnings) == 1 and size_text(over) in warnings[0] and size_text(physical) in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="locsum_sdk"):
        memory_limit(max(1, physical // 2))
    assert not caplog.records


@pytest.mark.parametrize("text,size", [("6GB", 6 * 10**9), ("512 MiB", 512 * 2**20), ("2.5g", 2_500_000_000),
                                       ("1000", 1000), (4096, 4096)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["lots", "", "-1MB", "0", 0, -5, True, float("nan"), "6 parsecs", [1]])
def test_bad_sizes(bad):
    with pytest.raises(OptionError, match="memory_limit"):
        LimitOptions(memory_limit=bad)


def test_default_limit_is_a_share_of_the_available_memory():
    available = available_memory()
    assert available is None or available > 0
    if available is not None:
        assert 0 < memory_limit(None) <= available
    assert memory_limit("1GB") == 10**9
    assert memory_limit(None, lambda: 10**9) == 8 * 10**8  # the backend's free memory, e.g. a GPU's
    assert memory_limit(None, lambda: None) is None
    assert memory_limit("1GB", lambda: 10) == 10**9


def test_the_default_limit_reads_the_free_memory_of_where_the_backend_runs(summarizer, monkeypatch):
    """A backend whose working memory lives on a GPU reports the GPU's free memory: the default limit is a share of
    that figure, not of this machine's."""
    assert summarizer.backend.free_memory() == pytest.approx(available_memory(), rel=0.5)
    monkeypatch.setattr(summarizer.backend, "free_memory", lambda: 5 * 10**6)
    with pytest.raises(MemoryLimitError, match="memory limit of 4 MB"):
        summarizer.summarize(topical_text(20), page_tokens=32)


def test_onnxruntime_on_cuda_reads_the_gpus_free_memory_through_cuda_python(monkeypatch):
    from types import SimpleNamespace

    from locsum_sdk.backends import cuda
    from locsum_sdk.backends.onnxruntime import OnnxRuntimeBackend
    from locsum_sdk.errors import BackendUnavailableError

    runtime = SimpleNamespace(cudaError_t=SimpleNamespace(cudaSuccess=0),
                              cudaMemGetInfo=lambda: (0, 5 * 10**9, 8 * 10**9))
    monkeypatch.setattr(cuda, "runtime", lambda: runtime)
    on_gpu = SimpleNamespace(device="cuda")
    assert OnnxRuntimeBackend.free_memory(on_gpu) == 5 * 10**9

    def missing():
        raise BackendUnavailableError("cuda-python is not installed")

    monkeypatch.setattr(cuda, "runtime", missing)
    assert OnnxRuntimeBackend.free_memory(on_gpu) == pytest.approx(available_memory(), rel=0.5)


def test_tfidf_feature_is_the_standardized_cosine_to_the_query():
    texts = [[5, 6, 7], [8, 9], [5, 5, 10], [11]]
    cosine = tfidf_cosine(texts, [5, 10])
    feature = tfidf_feature(texts, [5, 10])
    np.testing.assert_allclose(feature, (cosine - cosine.mean()) / cosine.std(), atol=1e-6)
    assert feature.dtype == np.float32 and feature.argmax() == 2 and abs(feature.mean()) < 1e-6
    assert not tfidf_feature([[5], [5]], [5]).any()  # no spread: no signal, not a division by zero


@pytest.mark.parametrize(("given", "shown"), [("50MB", "50 MB"), ("6GB", "6.0 GB"), ("2.5 gb", "2.5 GB"),
                                              ("512MiB", "537 MB"), (1500, "1.5 kB"), (999, "999 bytes")])
def test_sizes_are_printed_in_the_decimal_units_they_are_read_in(given, shown):
    assert size_text(parse_size(given)) == shown
