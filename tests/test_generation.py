"""The decoding loop: token-exact ORT == torch on long random inputs, HF `generate` semantics, filters."""

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import document
from hypothesis import given
from hypothesis import strategies as st

from locsum_sdk import Summarizer
from locsum_sdk.backends.base import BeamSlots, scatter_top
from locsum_sdk.backends.torch import TorchBackend
from locsum_sdk.errors import OptionError
from locsum_sdk.generation import (
    GenerationOptions,
    SeenNgrams,
    end_penalty_filter,
    generate,
    length_normalized,
)
from locsum_sdk.modeling.checkpoint import load_checkpoint
from locsum_sdk.unit_batch import UnitBatch
from locsum_sdk.units import Unit

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def summarizers(bundle_dir, checkpoint_dir):
    return (
        Summarizer.from_pretrained(bundle_dir, threads=1),
        Summarizer.from_pretrained(checkpoint_dir, backend="torch", threads=1),
    )


@pytest.mark.parametrize("num_beams", [1, 4])
def test_onnxruntime_and_torch_generate_the_same_tokens(summarizers, num_beams):
    """20 random long inputs (1 to about 40 pages): identical tokens and page weights on both backends."""
    ort, ref = summarizers
    rng = random.Random(num_beams)
    options = dict(num_beams=num_beams, max_length=20, no_repeat_ngram_size=3, min_length=4)
    pages = []
    for case in range(20):
        text = document(rng, 1 if case == 0 else rng.randint(2, 50))
        query = "What did the committee decide?" if case % 3 == 0 else None
        a, b = ort.summarize(text, query=query, **options), ref.summarize(text, query=query, **options)
        assert a.token_ids == b.token_ids, f"case {case}"
        assert a.text == b.text
        assert len(a.units) == len(b.units) and a.unit_weights.shape == (len(a.token_ids), len(a.units))
        np.testing.assert_allclose(a.unit_weights, b.unit_weights, atol=1e-4)
        np.testing.assert_allclose(a.unit_weights.sum(axis=1), 1, atol=1e-5)
        pages.append(len(a.units))
    assert min(pages) <= 3 and max(pages) >= 20


def test_reference_generate_in_torch_matches_the_summarizer(summarizers, checkpoint_dir):
    from locsum_sdk.backends.torch import generate_from_ids as reference_generate

    ort, _ = summarizers
    text = document(random.Random(21), 30)
    summary = ort.summarize(text, num_beams=3, max_length=16)
    model = load_checkpoint(checkpoint_dir).model
    units = [[u.token_ids for u in summary.units]]
    (hyp,) = reference_generate(model, units, GenerationOptions(num_beams=3, max_length=16))
    assert hyp.token_ids == summary.token_ids


def test_batch_padding_pages_change_nothing(summarizers):
    """A short input batched with a long one gets padding pages; its summary must not change."""
    ort, _ = summarizers
    rng = random.Random(11)
    short, long = document(rng, 6), document(rng, 60)
    for num_beams in (1, 3):
        alone = ort.summarize(short, num_beams=num_beams)
        together = ort.summarize_batch([short, long], num_beams=num_beams)
        assert len(together[1].units) > len(together[0].units)
        assert together[0].token_ids == alone.token_ids
        np.testing.assert_allclose(together[0].unit_weights, alone.unit_weights, atol=1e-6)


def test_beam_slots_follow_each_beam_history():
    slots = BeamSlots(batch=1, beams=2, chunk=2)
    assert not slots.advance(None) and slots.slots.tolist() == [[[0, -1], [1, -1]]]
    assert not slots.advance(np.array([[1, 1]]))  # both beams continue beam 1
    assert slots.slots.tolist() == [[[1, 0], [1, 1]]]
    assert slots.advance(np.array([[1, 0]]))  # swapped; full, so the capacity grows
    assert slots.capacity == 4 and slots.position == 2
    assert slots.slots.tolist() == [[[1, 1, 0, -1], [1, 0, 1, -1]]]


class ScriptedSession:
    """A backend session that returns fixed log-probabilities: the same row for every step and beam."""

    partial_log_probs = False

    def __init__(self, row):
        self.row = np.log(np.asarray(row, dtype=np.float32))

    def step(self, tokens, beam_index):
        batch, beams = tokens.shape
        return np.broadcast_to(self.row, (batch, beams, len(self.row))).copy(), np.ones((batch, 1, beams))


def test_min_length_forbids_eos():
    session = ScriptedSession([0.05, 0.05, 0.8, 0.1])  # eos (2) is the most likely token
    greedy = generate(session, 1, GenerationOptions(num_beams=1, max_length=10, min_length=4), 0, 2, 1)[0]
    assert greedy.token_ids == [3, 3, 3, 2]


@pytest.mark.parametrize("normalization", ["hf", "gnmt"])
def test_beam_scores_are_normalized_by_the_chosen_length_penalty(normalization):
    row = np.array([0.05, 0.05, 0.3, 0.6])  # eos (2) or token 3
    options = GenerationOptions(num_beams=2, max_length=8, min_length=3, length_penalty=1.5,
                                length_normalization=normalization)
    best = generate(ScriptedSession(row), 1, options, 0, 2, 1)[0]
    total = float(np.log(row.astype(np.float32))[best.token_ids].sum())
    n = len(best.token_ids)
    normalizer = n if normalization == "hf" else (5 + n) / 6  # GNMT: Wu et al. 2016, eq. 14
    assert best.score == pytest.approx(total / normalizer**1.5, rel=1e-5)
    assert length_normalized(total, n, options) == pytest.approx(best.score, rel=1e-5)


class TableSession:
    """A session whose log-probabilities follow each beam's last token through a fixed random table; with `top`,
    it gives only each beam's `top` best tokens, the others -inf, as a graph prepared for TensorRT does."""

    def __init__(self, vocab: int, top: int | None = None, seed: int = 0):
        logits = np.random.default_rng(seed).normal(size=(vocab, vocab)).astype(np.float32)
        self.table = logits - np.log(np.exp(logits).sum(-1, keepdims=True))  # (last token, V) log-probabilities
        self.top, self.partial_log_probs, self.full_reads = top, top is not None, 0

    def step(self, tokens, beam_index):
        self.last = self.table[tokens]  # (B, K, V)
        if self.top is None:
            return self.last.copy(), np.ones((*tokens.shape[:1], 1, tokens.shape[1]))
        best = np.argsort(-self.last, axis=-1, kind="stable")[..., : self.top]
        out = scatter_top(np.take_along_axis(self.last, best, -1), best.astype(np.int32), np.empty_like(self.last))
        return out, np.ones((*tokens.shape[:1], 1, tokens.shape[1]))

    def full_log_probs(self):
        self.full_reads += 1
        return self.last.copy()


class HistorySession(TableSession):
    """A table session whose unit weights name the beam they come from: (B, 2, K), the step's number and a hash of
    every token the beam was fed, its history followed through `beam_index` as a backend's caches are."""

    def __init__(self, vocab: int, seed: int):
        super().__init__(vocab, seed=seed)
        self.fed: np.ndarray | None = None  # (B, K, steps)

    def step(self, tokens, beam_index):
        if self.fed is None:
            self.fed = tokens[:, :, None]
        else:
            reordered = self.fed if beam_index is None else np.take_along_axis(self.fed, beam_index[:, :, None], 1)
            self.fed = np.concatenate([reordered, tokens[:, :, None]], axis=-1)
        log_probs, _ = super().step(tokens, beam_index)
        steps = self.fed.shape[-1]
        weights = np.stack([np.full(tokens.shape, steps, np.float64), history_hash(self.fed)], axis=1)
        return log_probs, weights.astype(np.float32)


def history_hash(fed: np.ndarray) -> np.ndarray:
    """A number per beam (exact in float32) for the tokens it was fed, in order."""
    code = np.zeros(fed.shape[:-1], np.int64)
    for step in range(fed.shape[-1]):
        code = (code * 131 + fed[..., step] + 1) % 65_521
    return code.astype(np.float64)


@given(vocab=st.integers(6, 30), beams=st.integers(1, 5), max_length=st.integers(2, 30), batch=st.integers(1, 3),
       seed=st.integers(0, 99), early=st.booleans())
def test_each_hypothesis_carries_the_step_weights_of_its_own_beams(vocab, beams, max_length, batch, seed, early):
    """Every hypothesis, finished early or at the last step, holds the weights each step gave the beam it grew from
    (read back along the beams it continued), and a step's report gives the leading beam's so far, read then or
    later."""
    options = GenerationOptions(num_beams=beams, max_length=max_length, early_stopping=early)
    reported, kept = [], []

    def report(step, partials):
        reported.append([(p.token_ids, p.unit_weights) for p in partials])
        kept.append(partials)

    hypotheses = generate(HistorySession(vocab, seed), batch, options, 0, 2, 1, on_step=report)
    # a partial read after decoding went on (its tokens and weights gathered when asked) is as it was at its step
    assert [[(p.token_ids, p.unit_weights.tolist()) for p in partials] for partials in kept] == \
        [[(tokens, weights.tolist()) for tokens, weights in step] for step in reported]
    for tokens, weights in [(h.token_ids, h.unit_weights) for h in hypotheses] + [r for step in reported for r in step]:
        fed = np.array([0, *tokens[:-1]])  # the start token, then each token written but the last
        assert weights.shape == (len(tokens), 2)
        np.testing.assert_array_equal(weights[:, 0], np.arange(1, len(tokens) + 1))
        np.testing.assert_array_equal(weights[:, 1], [history_hash(fed[: t + 1]) for t in range(len(tokens))])


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("top", [4, 8, 60])
def test_a_session_giving_only_the_best_tokens_decides_the_same(num_beams, top):
    """Only each beam's best tokens from the session (the TensorRT decoder's top_tokens): the same hypotheses
    token for token, reading the full log-probabilities only at steps where the repeat and length filters left a
    beam too few (a small `top`: often; a large one: never)."""
    options = GenerationOptions(num_beams=num_beams, max_length=40, min_length=12, no_repeat_ngram_size=1)
    want = generate(TableSession(60), 2, options, 0, 2, 1)
    partial = TableSession(60, top)
    got = generate(partial, 2, options, 0, 2, 1)
    assert [h.token_ids for h in got] == [h.token_ids for h in want]
    assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-6)
    if num_beams == 3 and top < 60:
        assert partial.full_reads > 0  # every token used is banned (no_repeat_ngram_size=1): beams ran short
    if top == 60:
        assert partial.full_reads == 0


@given(vocab=st.integers(6, 40), beams=st.integers(1, 4), top=st.integers(1, 40), max_length=st.integers(2, 24),
       min_length=st.integers(0, 24), no_repeat=st.integers(0, 3), batch=st.integers(1, 3), seed=st.integers(0, 99))
def test_best_tokens_only_never_change_a_decision(vocab, beams, top, max_length, min_length, no_repeat, batch, seed):
    """Any vocabulary, beam width, number of best tokens and filters: the same hypotheses as the full rows."""
    options = GenerationOptions(num_beams=beams, max_length=max_length, min_length=min(min_length, max_length),
                                no_repeat_ngram_size=no_repeat)
    want = generate(TableSession(vocab, seed=seed), batch, options, 0, 2, 1)
    got = generate(TableSession(vocab, min(top, vocab), seed=seed), batch, options, 0, 2, 1)
    assert [h.token_ids for h in got] == [h.token_ids for h in want]
    assert [h.score for h in got] == pytest.approx([h.score for h in want], rel=1e-6)


def test_no_repeat_ngram_filter_bans_completions():
    log_probs = np.zeros((1, 1, 6))
    SeenNgrams(2).apply(log_probs, np.array([[[2, 4, 5, 4]]]))
    assert np.isneginf(log_probs[0, 0, 5]) and np.isfinite(log_probs[0, 0, [0, 1, 2, 3, 4]]).all()


@pytest.mark.parametrize("option", [dict(num_beams=0), dict(max_length=1), dict(min_length=200),
                                    dict(no_repeat_ngram_size=-1), dict(length_normalization="wu")])
def test_bad_generation_options(option):
    from locsum_sdk.errors import OptionError

    with pytest.raises(OptionError):
        GenerationOptions(**option).validate()


HF_CASES = [
    dict(num_beams=1, max_length=16),
    dict(num_beams=1, max_length=16, min_length=10, no_repeat_ngram_size=2),
    dict(num_beams=4, max_length=16),
    dict(num_beams=3, max_length=14, length_penalty=2.0, no_repeat_ngram_size=3, min_length=5),
    dict(num_beams=3, max_length=14, length_penalty=0.5, early_stopping=False),
]


@pytest.mark.parametrize("options", HF_CASES)
def test_one_page_matches_hf_generate(tmp_path_factory, options):
    """PageSum with one page is BART: our loop must produce what HF `generate` produces."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=60, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        forced_eos_token_id=None, attn_implementation="eager",
    )
    hf = transformers.BartForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)
        hf.final_logits_bias.zero_()
    hf.tie_weights()
    directory = tmp_path_factory.mktemp("hf")
    hf.save_pretrained(directory)
    backend = TorchBackend(load_checkpoint(directory).model)
    rng = np.random.default_rng(0)
    for _ in range(3):
        ids = [0, *rng.integers(5, 60, 30).tolist(), 2]
        expected = hf.generate(torch.tensor([ids]), do_sample=False, **options)[0, 1:].tolist()
        if 2 in expected:
            expected = expected[: expected.index(2) + 1]
        batch = UnitBatch.from_units([[Unit(0, 0, 0, "", tuple(ids))]], pad=1)
        session = backend.start(batch, options["num_beams"], unit_batch_size=1)
        got = generate(session, 1, GenerationOptions(**options), start=2, eos=2, pad=1)[0]
        assert got.token_ids == expected


@pytest.mark.parametrize("num_beams", [1, 3])
def test_on_step_reports_each_inputs_decoding_and_can_stop_it(bundle_dir, num_beams):
    summarizer = Summarizer.from_pretrained(bundle_dir, threads=1)
    rng = random.Random(5)
    texts = [document(rng, 3), document(rng, 40), document(rng, 9)]
    seen: list[tuple[int, dict]] = []
    summaries = summarizer.summarize_batch(texts, num_beams=num_beams, max_length=12, page_tokens=32,
                                           on_step=lambda step, partials: seen.append((step, partials)))
    unwatched = summarizer.summarize_batch(texts, num_beams=num_beams, max_length=12, page_tokens=32)
    assert [s.token_ids for s in summaries] == [s.token_ids for s in unwatched]  # watching changes nothing
    last = {}
    for step, partials in seen:
        assert step >= 1 and set(partials) <= {0, 1, 2}
        last.update(partials)
    assert set(last) == {0, 1, 2}  # every input, under its index in the call, whatever its decoding batch
    for index, summary in enumerate(summaries):
        if num_beams == 1 or last[index].finished:
            assert last[index].token_ids == summary.token_ids

    class Stop(Exception):
        pass

    def stop(step, partials):
        if step == 2:
            raise Stop

    with pytest.raises(Stop):
        summarizer.summarize(texts[1], num_beams=num_beams, on_step=stop)
    assert summarizer.summarize(texts[1], num_beams=num_beams, max_length=12, page_tokens=32).token_ids == \
        summaries[1].token_ids  # the stopped call left nothing behind
    with pytest.raises(OptionError, match="on_step is a int"):
        summarizer.summarize(texts[0], on_step=3)


def test_the_repetition_penalty_scales_each_written_token_once_and_is_refused_out_of_range():
    from locsum_sdk.errors import OptionError
    from locsum_sdk.generation import GenerationOptions, repetition_penalty_filter

    log_probs = np.log(np.full((1, 2, 6), 1 / 6, dtype=np.float32))
    sequences = np.array([[[0, 3, 3, 4], [0, 5, 1, 1]]])  # start token, then what each beam wrote
    before = log_probs.copy()
    repetition_penalty_filter(log_probs, sequences, 2.0)
    assert np.allclose(log_probs[0, 0, [3, 4]], 2 * before[0, 0, [3, 4]])  # 3 written twice, penalized once
    assert np.allclose(log_probs[0, 1, [1, 5]], 2 * before[0, 1, [1, 5]])
    assert np.array_equal(log_probs[0, 0, [0, 1, 2, 5]], before[0, 0, [0, 1, 2, 5]])  # the start token is not written
    for bad in (0.5, 11.0, float("nan")):
        with pytest.raises(OptionError, match="repetition_penalty"):
            GenerationOptions(repetition_penalty=bad)


def test_a_repetition_penalty_reads_the_full_distribution_and_decides_as_without_partial_reads():
    """A session that gives each beam's best tokens only decides as one giving all of them, penalty on."""
    from locsum_sdk.generation import GenerationOptions, generate

    table = np.log(np.random.default_rng(3).dirichlet(np.ones(12) * 0.3, size=(40,)).astype(np.float32))

    def session(partial):
        return StepTableSession(table, partial, 2, 4)

    options = GenerationOptions(num_beams=2, max_length=20, min_length=19, repetition_penalty=3.0)
    full = generate(session(False), 1, options, start=0, eos=1, pad=2)
    partial = generate(session(True), 1, options, start=0, eos=1, pad=2)
    assert full[0].token_ids == partial[0].token_ids
    plain = generate(session(False), 1, GenerationOptions(num_beams=2, max_length=20, min_length=19), 0, 1, 2)
    assert len(set(full[0].token_ids)) >= len(set(plain[0].token_ids))


class StepTableSession:
    """A session giving row `step` of a fixed (steps, V) table of log-probabilities at every step, to every beam;
    partial: each beam sees only its `top` best tokens, the others -inf."""

    def __init__(self, table: np.ndarray, partial: bool, beams: int, top: int):
        self.table, self.partial_log_probs, self.beams, self.top, self.step_index = table, partial, beams, top, 0

    def step(self, tokens, beam_index):
        self.full = np.repeat(self.table[self.step_index][None, None], self.beams, axis=1)
        self.step_index += 1
        if not self.partial_log_probs:
            return self.full.copy(), np.ones((1, 1, self.beams), np.float32)
        shown = np.full_like(self.full, -np.inf)
        best = np.argsort(-self.full, axis=-1)[..., : self.top]
        np.put_along_axis(shown, best, np.take_along_axis(self.full, best, -1), -1)
        return shown, np.ones((1, 1, self.beams), np.float32)

    def full_log_probs(self):
        return self.full.copy()


def ending_session(partial: bool, beams: int, seed: int = 5) -> StepTableSession:
    """A table in which end-of-sequence (token 1) is often the best token; partial: each beam's 3 best shown."""
    weights = np.ones(12) * 0.4
    weights[1] = 3.0
    table = np.log(np.random.default_rng(seed).dirichlet(weights, size=(40,)).astype(np.float32))
    return StepTableSession(table, partial, beams, 3)


def test_the_end_penalty_lowers_only_end_of_sequence_and_is_refused_out_of_range():
    log_probs = np.log(np.full((2, 3, 6), 1 / 6, dtype=np.float32))
    before = log_probs.copy()
    end_penalty_filter(log_probs, 4, 2.5)
    assert np.allclose(log_probs[..., 4], before[..., 4] - 2.5)
    assert np.array_equal(np.delete(log_probs, 4, -1), np.delete(before, 4, -1))
    end_penalty_filter(log_probs, 4, 0.0)
    assert np.allclose(log_probs[..., 4], before[..., 4] - 2.5)
    for bad in (-0.5, 21.0, float("nan"), float("inf")):
        with pytest.raises(OptionError, match="end_penalty"):
            GenerationOptions(end_penalty=bad)


@pytest.mark.parametrize("beams", [1, 2])
def test_an_end_penalty_writes_longer_and_decides_as_without_partial_reads(beams):
    """Ending is put off; a session giving each beam's best tokens only decides as one giving all of them."""
    def length(penalty, partial):
        options = GenerationOptions(num_beams=beams, max_length=30, end_penalty=penalty)
        return generate(ending_session(partial, beams), 1, options, start=0, eos=1, pad=2)[0].token_ids

    plain = length(0.0, False)
    assert len(plain) < 6 and plain[-1] == 1  # this table ends early
    lengths = [len(length(penalty, False)) for penalty in (0.0, 1.0, 3.0, 20.0)]
    assert lengths == sorted(lengths) and lengths[-1] == 29  # 20: ending is left only to max_length
    for penalty in (1.0, 3.0):
        assert length(penalty, True) == length(penalty, False)


def test_a_summarizer_and_the_command_line_take_the_end_penalty(tmp_path):
    from locsum_sdk.cli import main

    summarizer = Summarizer.from_pretrained(ROOT / "engines" / "pagesum", threads=1)
    text = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8")[:3000]
    plain = summarizer.summarize(text, num_beams=1, max_length=60, min_length=0)
    longer = summarizer.summarize(text, num_beams=1, max_length=60, min_length=0, end_penalty=20.0)
    assert len(longer.token_ids) >= len(plain.token_ids)
    assert len(longer.token_ids) == 59 or longer.token_ids[-1] != summarizer.model["eos_token_id"]
    (tmp_path / "note.txt").write_text(text, encoding="utf-8")
    assert main(["summarize", str(tmp_path / "note.txt"), "--bundle", "pagesum", "--max-length", "12",
                 "--end-penalty", "2", "--json"]) == 0
