"""Known words: the word lists, the tokenizer's pieces, the decoding filter, and the option end to end."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, document
from hypothesis import given
from hypothesis import strategies as st
from test_generation import TableSession

from locsum_sdk import Summarizer
from locsum_sdk.constants import WORDS_FILE
from locsum_sdk.errors import DataError, OptionError
from locsum_sdk.generation import GenerationOptions, generate
from locsum_sdk.words import (
    WORD,
    BeamWords,
    Pieces,
    WordGuard,
    WordList,
    input_words,
    piece_texts,
    words_of,
    written_as_words_are,
)

ROOT = Path(__file__).resolve().parents[1]

# A toy vocabulary: 0-2 special, 3 "Ġgan", 4 "y", 5 "med", 6 "e", 7 "Ġthe", 8 ".", 9 "rive", 10 "Ġsh", 11 "ip".
TOY = [None, None, None, "gan", "y", "med", "e", "the", None, "rive", "sh", "ip"]
TOY_OPENS = [False, False, False, True, False, False, False, True, False, False, True, False]


def toy_pieces(letters=TOY, opens=TOY_OPENS) -> Pieces:
    opens = np.array(opens, dtype=bool)
    return Pieces(list(letters), opens, np.array([t is not None for t in letters]) & ~opens)


def step_by_step(pieces: Pieces, sequences: np.ndarray, *followers) -> BeamWords:
    """`BeamWords` and `followers` (`KeywordBeams`, `RepeatCounts`) taken through sequences (B, K, T) after their
    start token, one token a step, each beam continuing itself."""
    words = BeamWords(pieces, *sequences.shape[:2])
    for step in range(1, sequences.shape[2]):
        words.advance(sequences[:, :, step], None)
        for follower in followers:
            follower.advance(words, None)
    return words


def allowed(guard: WordGuard, sequence: list[int], needed: int = 12, complete: bool = True) -> set[int]:
    vocab = len(guard.pieces.letters)
    log_probs = np.log(np.full((1, 1, vocab), 1 / vocab, dtype=np.float32))
    guard.apply(log_probs, np.array([[sequence]]), needed, complete)
    return set(np.flatnonzero(np.isfinite(log_probs[0, 0])).tolist())


def test_word_list_finds_words_and_their_starts(tmp_path):
    words = WordList(["ganymede", "ship", "shipment", "ship"])
    assert len(words) == 3
    assert words.has_prefix("gany") and words.has_prefix("ganymede") and not words.has_prefix("ganyx")
    assert words.has_word("ship") and not words.has_word("shi") and not words.has_word("zzz")
    assert WordList.read(words.write(tmp_path / "words.txt")).words == words.words
    assert words_of(["Ganymede's 2 ships, naïve_Ship"]) == {"ganymede", "s", "ships", "naïve", "ship"}


@pytest.mark.parametrize("content", [b"\xff\xfe", b"ship\nTwo words\n", b"ship\n\nboat\n", b"Ship\n"])
def test_a_damaged_word_list_is_refused(tmp_path, content):
    path = tmp_path / "words.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match="word list"):
        WordList.read(path)
    with pytest.raises(DataError, match="cannot read"):
        WordList.read(tmp_path / "missing.txt")


def test_pieces_of_a_byte_level_tokenizer(tokenizer):
    pieces = Pieces.from_tokenizer(tokenizer, tokenizer.get_vocab_size() + 5)
    assert len(pieces.letters) == tokenizer.get_vocab_size() + 5 and pieces.letters[-1] is None
    for token in ("<s>", "</s>", "<pad>"):
        assert pieces.letters[tokenizer.token_to_id(token)] is None
    ids = tokenizer.encode(" The committee.", add_special_tokens=False).ids
    assert [word for word, _ in finished_words(pieces, ids)] == ["the", "committee"]
    assert pieces.opens[ids[0]] and not pieces.continues[ids[0]]


def test_byte_level_pieces_are_their_whole_characters_or_nothing():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    # "é" is bytes c3 a9, whose stand-ins are "Ã" and "©"; "\n" (byte 10) stands in as "Ċ"; a raw "\n" in a
    # piece stands for no byte
    vocab = {"Ġcaf": 0, "Ã©": 1, "Ã": 2, "©": 3, "ĊĠthe": 4, "a\nb": 5, "ĠðŁĺĢ": 6}
    tokenizer = Tokenizer(models.BPE(vocab, [], unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    texts, marked, special = piece_texts(tokenizer, len(vocab) + 1, "known_words")
    assert texts == ["caf", "é", "", "", "\n the", "", "\U0001f600", ""] and special == set()
    assert marked == [True, False, False, False, False, False, True, False]
    assert texts[1] == tokenizer.decode([1]) and texts[6] == tokenizer.decode([6]).lstrip()


def test_pieces_of_wordpiece_and_sentencepiece_tokenizers_and_a_refusal():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = {"[UNK]": 0, "gan": 1, "##y": 2, "##1": 3, ".": 4}
    wordpiece = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    pieces = Pieces.from_tokenizer(wordpiece)
    assert pieces.letters == [None, "gan", "y", None, None] and pieces.opens.tolist()[:3] == [True, True, False]
    metaspace = Tokenizer(models.BPE({"▁Gan": 0, "y": 1, "▁": 2, "ga": 3}, [], unk_token=None))
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace()
    pieces = Pieces.from_tokenizer(metaspace)
    assert pieces.letters == ["gan", "y", None, "ga"] and pieces.opens.tolist() == [True, False, True, False]
    # as Llama's and Mistral's tokenizers converted from SentencePiece: the marker added by the normalizer and turned
    # back into a space by the decoder, characters the vocabulary lacks as their UTF-8 bytes
    legacy = Tokenizer(models.BPE({"<unk>": 0, "▁Gan": 1, "y": 2, "▁": 3, "<0x0A>": 4, "<0xC3>": 5, "<0x41>": 6},
                                  [], unk_token="<unk>", byte_fallback=True))
    legacy.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    legacy.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                        decoders.Strip(" ", 1, 0)])
    pieces = Pieces.from_tokenizer(legacy)
    assert pieces.letters == [None, "gan", "y", None, None, None, "a"]
    assert pieces.opens.tolist() == [False, True, False, True, False, False, False]
    assert piece_texts(legacy, None, "known_words")[0][4:] == ["\n", "", "A"]  # a newline, half a character, a letter
    plain = Tokenizer(models.WordLevel({"gan": 0, "[UNK]": 1}, unk_token="[UNK]"))
    plain.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(OptionError, match="known_words"):
        Pieces.from_tokenizer(plain)


def test_loading_builds_the_piece_tables_its_default_options_read_once(monkeypatch):
    from locsum_sdk.sentences import SentenceEnds

    built = {"pieces": 0, "sentence ends": 0}

    def counted(table, name):
        original = table.from_texts.__func__

        def from_texts(cls, *args):
            built[name] += 1
            return original(cls, *args)

        monkeypatch.setattr(table, "from_texts", classmethod(from_texts))

    counted(Pieces, "pieces")
    counted(SentenceEnds, "sentence ends")
    summarizer = Summarizer.from_pretrained(ROOT / "engines" / "pagesum", threads=1)  # known_words on, not the other
    assert built == {"pieces": 1, "sentence ends": 0}
    text = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8")[:2000]
    summarizer.summarize(text, max_length=12)
    summarizer.summarize(text, max_length=12, whole_sentences=True)
    summarizer.summarize(text, max_length=12, whole_sentences=True)
    assert built == {"pieces": 1, "sentence ends": 1}


def test_a_word_of_several_pieces_grows_only_into_a_known_word():
    guard = WordGuard(toy_pieces(), [[WordList(["ganymede"]), WordList(["ship"])]])
    assert guard.current_word([2, 3, 4]) == ("gany", 2) and guard.current_word([2, 3, 8]) == ("", 0)
    assert allowed(guard, [2]) == set(range(12))  # no word started: anything
    assert allowed(guard, [2, 3]) == set(range(12)) - {5, 6, 9, 11}  # "gan" + y; or the one-piece "gan" ends
    assert allowed(guard, [2, 3, 4]) == {5}  # "gany" is no word: only "ganymed" continues it
    assert allowed(guard, [2, 3, 4, 5]) == {6}
    assert allowed(guard, [2, 3, 4, 5, 6]) == set(range(12)) - {4, 5, 6, 9, 11}  # "ganymede" is whole: it may end
    assert allowed(guard, [2, 10]) == set(range(12)) - {4, 5, 6, 9}  # "sh" + "ip" from the second list


def test_a_word_of_several_pieces_is_written_as_words_are_or_as_the_input_writes_it():
    """"MistY" and "ScarCity" never; "Misty", "SCAR" and "Smartkom" yes; "SmartKom" where the input writes it so."""
    # 0-2 special, 3 "ĠMist", 4 "y", 5 "Y", 6 "ĠSC", 7 "AR", 8 "ĠSmart", 9 "Kom", 10 "kom", 11 "ĠScar", 12 "City"
    letters = [None, None, None, "mist", "y", "y", "sc", "ar", "smart", "kom", "kom", "scar", "city"]
    opens = np.array([False] * 3 + [True, False, False, True, False, True, False, False, True, False])
    pieces = Pieces(letters, opens, np.array([t is not None for t in letters]) & ~opens,
                    capitals={3: "Mist", 5: "Y", 6: "SC", 7: "AR", 8: "Smart", 9: "Kom", 11: "Scar", 12: "City"})
    lowered, mixed = input_words(["The Misty Ones met at SmartKom; SCAR and scarcity. McDonald's iPhone"])
    assert mixed.words == ["McDonald", "SmartKom", "iPhone"] and lowered.has_word("smartkom")
    guard = WordGuard(pieces, [[lowered]], mixed=[mixed])
    assert guard.current_word([2, 3, 5]) == ("MistY", 2)
    assert allowed(guard, [2, 3], 13) & {4, 5} == {4}  # "Misty", not "MistY"
    assert allowed(guard, [2, 6], 13) & {7} == {7}  # "SCAR"
    assert allowed(guard, [2, 11], 13) & {12} == set()  # "ScarCity": written so nowhere
    assert allowed(guard, [2, 8], 13) & {9, 10} == {9, 10}  # "SmartKom" as the input writes it, or "Smartkom"
    unchecked = WordGuard(pieces, [[lowered]])  # no mixed words given: only words written as words are
    assert allowed(unchecked, [2, 8], 13) & {9, 10} == {10}
    assert all(map(written_as_words_are, ["a", "A", "misty", "Misty", "MISTY", "Ünter", "ÜNTER"]))
    assert not any(map(written_as_words_are, ["MistY", "mIsty", "SCar", "iPhone"]))


def test_the_filter_checks_the_best_tokens_until_enough_are_allowed():
    guard = WordGuard(toy_pieces(), [[WordList(["ganymede"])]])
    log_probs = np.log(np.array([[[1, 1, 1, 1, 60, 1, 1, 1, 1, 90, 1, 50]]], dtype=np.float32) / 210)
    guard.apply(log_probs, np.array([[[2, 3]]]), 1, True)
    assert np.isneginf(log_probs[0, 0, 9]) and np.isfinite(log_probs[0, 0, 4])  # "rive" out, "y" kept
    assert np.isfinite(log_probs[0, 0, 11])  # below the first allowed token: never chosen, never checked


def test_a_row_the_filter_would_empty():
    letters = [None, None, None, "ca", "f", "e"]  # no piece holds "é"
    guard = WordGuard(toy_pieces(letters, [False, False, False, True, False, False]), [[WordList(["café"])]])
    assert allowed(guard, [2, 3, 4], complete=False) == set()  # the caller reads the full row next
    assert allowed(guard, [2, 3, 4]) == set(range(6))  # no piece finishes "caf": left as it was


def test_generate_needs_a_guard_for_known_words():
    with pytest.raises(OptionError, match="known_words"):
        generate(TableSession(12), 1, GenerationOptions(num_beams=1, known_words=True), 0, 2, 1)


def random_pieces(vocab: int, rng: random.Random) -> Pieces:
    """Special 0-2, one-letter continuations of a-d at 3-6, then random pieces (some opening, some punctuation)."""
    letters: list[str | None] = [None, None, None, "a", "b", "c", "d"]
    opens = [False] * 7
    for _ in range(vocab - 7):
        roll = rng.random()
        letters.append(None if roll < 0.15 else "".join(rng.choices("abcd", k=rng.randint(1, 3))))
        opens.append(roll < 0.15 or roll > 0.55)
    return toy_pieces(letters, opens)


def finished_words(pieces: Pieces, token_ids: list[int]) -> list[tuple[str, int]]:
    """The words of a sequence that a later token ends, with their piece counts."""
    words, word, parts = [], "", 0
    for token in token_ids:
        if pieces.continues[token] and parts:
            word, parts = word + pieces.letters[token], parts + 1
            continue
        if parts:
            words.append((word, parts))
        word, parts = pieces.letters[token] or "", int(pieces.letters[token] is not None)
    return words


@given(vocab=st.integers(12, 40), beams=st.integers(1, 4), top=st.integers(1, 40), max_length=st.integers(2, 24),
       min_length=st.integers(0, 24), batch=st.integers(1, 3), seed=st.integers(0, 999))
def test_known_words_never_end_a_made_up_word_and_best_tokens_decide_the_same(vocab, beams, top, max_length,
                                                                                min_length, batch, seed):
    """Random pieces, lists and tables: every finished word of several pieces is a known one, and a session giving
    only each beam's best tokens decides exactly as one giving full rows."""
    rng = random.Random(seed)
    pieces = random_pieces(vocab, rng)
    known = [[WordList("".join(rng.choices("abcd", k=rng.randint(2, 7))) for _ in range(rng.randint(1, 6)))]
             for _ in range(batch)]
    options = GenerationOptions(num_beams=beams, max_length=max_length, min_length=min(min_length, max_length),
                                known_words=True)
    want = generate(TableSession(vocab, seed=seed), batch, options, 0, 2, 1, guard=WordGuard(pieces, known))
    got = generate(TableSession(vocab, min(top, vocab), seed=seed), batch, options, 0, 2, 1,
                   guard=WordGuard(pieces, known))
    assert [h.token_ids for h in got] == [h.token_ids for h in want]
    for item, hypothesis in enumerate(want):
        for word, parts in finished_words(pieces, hypothesis.token_ids):
            assert parts <= 1 or known[item][0].has_word(word), (word, hypothesis.token_ids)


@pytest.fixture(scope="module")
def word_checkpoint(tmp_path_factory, tokenizer, tokenizer_file):
    """A tiny random PageSum pushed towards letter pieces (so that it strings them into made-up words), with the
    words of the test documents as its list."""
    import torch
    from conftest import TINY_GENERATION, TINY_UNITS, WORDS, random_pagesum

    from locsum_sdk.modeling.checkpoint import save_checkpoint

    model = random_pagesum(tokenizer.get_vocab_size(), seed=3)
    pieces = Pieces.from_tokenizer(tokenizer, model.config.vocab_size)
    bias = dict(model.named_buffers())[next(n for n, _ in model.named_buffers() if n.endswith("final_logits_bias"))]
    with torch.no_grad():
        bias[0, torch.from_numpy(pieces.continues)] += 4.0
        bias[0, torch.from_numpy(pieces.opens & np.array([t is not None for t in pieces.letters]))] += 2.0
    directory = tmp_path_factory.mktemp("words-ckpt")
    words = WordList(WORDS).write(directory / "list.txt")
    return save_checkpoint(model, directory / "checkpoint", tokenizer_file, words, units=TINY_UNITS,
                           generation=TINY_GENERATION)


@pytest.fixture(scope="module")
def word_bundle(tmp_path_factory, word_checkpoint):
    from locsum_sdk.exporters.onnx import export_onnx

    return export_onnx(word_checkpoint, tmp_path_factory.mktemp("wb") / "bundle").path


def test_a_bundle_carries_its_word_list(word_bundle, word_checkpoint, tmp_path, checkpoint_dir):
    """The list beside the checkpoint goes into the bundle and its checksums; a damaged one stops the export."""
    manifest = json.loads((word_bundle / "manifest.json").read_text())
    assert WORDS_FILE in manifest["files"]
    summarizer = Summarizer.from_pretrained(word_bundle, threads=1)
    assert summarizer.words is not None and summarizer.words.words == sorted(WORDS)
    assert Summarizer.from_pretrained(word_checkpoint, backend="torch").words.words == sorted(WORDS)
    assert Summarizer.from_pretrained(checkpoint_dir, backend="torch").words is None  # that one has none
    bad = tmp_path / "bad.txt"
    bad.write_text("Two Words\n")
    from locsum_sdk.exporters.onnx import export_onnx

    with pytest.raises(DataError, match="word list"):
        export_onnx(checkpoint_dir, tmp_path / "out", words=bad)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("num_beams", [1, 3])
def test_known_words_on_onnxruntime_and_torch_give_the_same_tokens(word_bundle, word_checkpoint, num_beams):
    """The filter runs in the shared loop: token-exact on both backends, and no finished word of several pieces
    outside the input's words and the bundle's list."""
    ort = Summarizer.from_pretrained(word_bundle, threads=1)
    ref = Summarizer.from_pretrained(word_checkpoint, backend="torch", threads=1)
    rng = random.Random(num_beams)
    pieces = Pieces.from_tokenizer(ort.tokenizer, ort.model["vocab_size"])
    options = dict(num_beams=num_beams, max_length=24, min_length=6, known_words=True)
    changed = 0
    for case in range(6):
        text = document(rng, rng.randint(1, 20))
        a, b = ort.summarize(text, **options), ref.summarize(text, **options)
        assert a.token_ids == b.token_ids, f"case {case}"
        real = words_of([text]) | set(ort.words.words)
        for word, parts in finished_words(pieces, a.token_ids):
            assert parts <= 1 or word in real, word
        changed += a.token_ids != ort.summarize(text, **{**options, "known_words": False}).token_ids
    assert changed > 0  # a random model makes words up: the filter had something to do


@pytest.fixture(scope="module")
def word_summarizer(tmp_path_factory, word_bundle):
    """The word bundle with a common-words list (for `keywords`), and the words its tokens hold one each."""
    from locsum_sdk.exporters.defaults import set_defaults

    common = WordList(["the", "and"]).write(tmp_path_factory.mktemp("common") / "common_words.txt")
    bundle = set_defaults(word_bundle, tmp_path_factory.mktemp("kw") / "bundle", {}, common_words=common)
    summarizer = Summarizer.from_pretrained(bundle.path, threads=1)
    return summarizer, one_piece_words(summarizer.tokenizer)


def one_piece_words(tokenizer) -> set[str]:
    """Every run of letters one token holds, lowercased and as written: a word a summary may write in one piece,
    known or not."""
    return {word for i in range(tokenizer.get_vocab_size()) for found in WORD.findall(tokenizer.decode([i]))
            for word in (found, found.lower())}


@given(text=st.text(alphabet=st.sampled_from(list("ptbviewcoransdBVIEWCOR .,;:'!?-\n")), min_size=1, max_size=60)
       .filter(lambda t: any(c.isalpha() for c in t)),
       num_beams=st.integers(1, 3), max_length=st.integers(2, 24), keywords=st.integers(0, 5),
       keyword_bonus=st.sampled_from([0.0, 3.0, 5.0, 8.0, 10.0]), page_tokens=st.sampled_from([8, 16, 64]))
def test_known_words_let_no_made_up_word_through(word_summarizer, text, num_beams, max_length, keywords,
                                                 keyword_bonus, page_tokens):
    """Whatever the input and decoding options, every word of a summary is a word of its input, of the bundle's
    list, or one token's own: no path completes a made-up word (a piece mixing letters and punctuation after a
    word's start, end of sequence, max_length in the middle of a word, a keyword's bonus)."""
    summarizer, one_piece = word_summarizer
    summary = summarizer.summarize(text, known_words=True, num_beams=num_beams, max_length=max_length,
                                   min_length=0, keywords=keywords, keyword_bonus=keyword_bonus,
                                   page_tokens=page_tokens)
    allowed = words_of([text]) | set(summarizer.words.words) | one_piece
    assert words_of([summary.text]) <= allowed, (summary.text, words_of([summary.text]) - allowed)
    written = {word for word in WORD.findall(summary.text) if not written_as_words_are(word)}
    assert written <= set(WORD.findall(text)) | one_piece, (summary.text, written)  # "BiEw" only as the input has it


def test_a_mixed_piece_finishes_a_word_only_into_a_known_one_and_special_tokens_are_never_written():
    """'ense.' after 'Cor' writes 'Corense.': the letters a mixed piece starts with finish the word before it; a
    special token other than end-of-sequence ('<s>') is left out of the text and would join 'Cor' and 'ense'."""
    letters = [None, None, None, "cor", "ense", None, "the", None]  # 0 <s>, 1 <pad>, 2 </s>, 5 "ense.", 7 "'s"
    opens = np.array([False, False, False, True, False, False, True, False])
    pieces = Pieces(letters, opens, np.array([t is not None for t in letters]) & ~opens, ends={5: "ense"},
                    starts={7: "s"}, special=frozenset({0, 1, 2}))
    guard = WordGuard(pieces, [[WordList(["cor", "the"])]], eos=2)
    after_cor = allowed(guard, [3])
    assert 5 not in after_cor and 2 in after_cor and not {0, 1} & after_cor  # "corense" is no word; "cor" is
    assert 5 in allowed(WordGuard(pieces, [[WordList(["cor", "corense"])]], eos=2), [3])
    assert guard.current_word([6, 7]) == ("s", 1)  # "the's": the mixed piece starts a word of its own
    assert guard.unfinished(0, [3, 4], eos=2) == 2 and guard.unfinished(0, [3, 4, 2], eos=2) == 2
    assert guard.unfinished(0, [6, 2], eos=2) == 0


@given(values=st.lists(st.sampled_from([-np.inf, -3.0, -1.5, -0.0, 0.0, 2.0, np.nan]) | st.floats(-9, 9, width=32),
                       max_size=300),
       first=st.integers(1, 70), growth=st.integers(2, 9))
def test_the_guard_reads_a_row_best_first_in_growing_parts(values, first, growth):
    """Every finite entry once, highest first, equal ones by index, however the row is cut into parts."""
    from locsum_sdk.words import _best_first

    row = np.array(values, np.float32)
    want = sorted(np.flatnonzero(np.isfinite(row)).tolist(), key=lambda i: (-row[i], i))
    assert list(_best_first(row, first, growth)) == want
