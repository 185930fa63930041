"""whole_sentences: a summary that max_length cuts ends at its last full sentence, on the default bundle's
byte-level BPE, the test tokenizer, a decoding loop and a Summarizer."""

import lzma
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer

from locsum_sdk import Summarizer
from locsum_sdk.errors import OptionError
from locsum_sdk.generation import GenerationOptions, generate
from locsum_sdk.sentences import SentenceEnds

ROOT = Path(__file__).resolve().parents[1]
EOS = 1


@pytest.fixture(scope="module")
def smollm2():
    tokenizer = Tokenizer.from_str(lzma.decompress((ROOT / "engines/default/tokenizer.json.xz").read_bytes()).decode())
    return tokenizer, SentenceEnds.from_tokenizer(tokenizer)


def kept_text(tokenizer, ends: SentenceEnds, text: str) -> str:
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return tokenizer.decode(ids[: ends.kept(ids, eos=-1)])


@pytest.mark.parametrize("cut, whole", [
    ("The board met. It approved the budget and then the", "The board met."),
    ("The board met. It approved the budget!\nThen the", "The board met. It approved the budget!"),
    ('He said "Go now." Then he', 'He said "Go now."'),
    ("Was it late? (It was.) The", "Was it late? (It was.)"),
    ("Mr. Smith spoke first. Dr. Jones then", "Mr. Smith spoke first."),
    ("They met J. K. Rowling. She said", "They met J. K. Rowling."),
    ("Costs rose. In the U.S. and e.g. France", "Costs rose."),
    ("It rose 3.5 percent in the", "It rose 3.5 percent in the"),  # no full sentence: left as it is
    ("The board met.", "The board met."),  # already ends a sentence
    ("The end is near…\nThe", "The end is near…"),
])
def test_a_cut_summary_keeps_its_full_sentences(smollm2, cut, whole):
    tokenizer, ends = smollm2
    assert kept_text(tokenizer, ends, cut) == whole


def test_a_summary_that_ended_by_itself_is_left_as_it_is(smollm2):
    tokenizer, ends = smollm2
    ids = tokenizer.encode("The board met. It approved the", add_special_tokens=False).ids + [7]
    assert ends.kept(ids, eos=7) == len(ids) and ends.kept([], eos=7) == 0


def test_the_test_tokenizer_has_sentence_ends_and_special_tokens_end_nothing(tokenizer):
    ends = SentenceEnds.from_tokenizer(tokenizer, tokenizer.get_vocab_size() + 3)
    assert len(ends.texts) == tokenizer.get_vocab_size() + 3
    assert not ends.ends[tokenizer.token_to_id("</s>")] and ends.texts[tokenizer.token_to_id("<s>")] == ""
    ids = tokenizer.encode("The committee met. The budget", add_special_tokens=False).ids
    assert tokenizer.decode(ids[: ends.kept(ids, eos=-1)]) == "The committee met."


@given(st.lists(st.sampled_from(["The", " board", " met", ".", " It", "!", '"', " Mr", "3", " e", "g", "\n", "?"]),
                max_size=20))
def test_what_is_kept_is_a_prefix_ending_a_sentence_or_everything(smollm2, words):
    tokenizer, ends = smollm2
    ids = [i for word in words for i in tokenizer.encode(word, add_special_tokens=False).ids]
    count = ends.kept(ids, eos=-1)
    assert 0 <= count <= len(ids)
    if count < len(ids):
        text = tokenizer.decode(ids[:count]).rstrip("\"')")
        assert text.endswith((".", "!", "?")) and tokenizer.decode(ids[count:count + 1])[:1].isspace()


class Writer:
    """A session that writes `script` (token ids) and then token 3 for ever, never end-of-sequence."""

    partial_log_probs = False

    def __init__(self, script: list[int], vocab: int):
        self.script, self.vocab, self.step_index = script, vocab, 0

    def step(self, tokens, beam_index):
        token = self.script[self.step_index] if self.step_index < len(self.script) else 3
        self.step_index += 1
        self.full = np.full((1, 1, self.vocab), -20.0, np.float32)
        self.full[0, 0, token] = 0.0
        return self.full.copy(), np.ones((1, 2, 1), np.float32)

    def full_log_probs(self):
        return self.full.copy()


def test_the_decoding_loop_cuts_at_the_last_sentence_end_with_its_weights():
    # tokens: 3 " the", 4 ".", 5 " cat", 6 "ran"
    ends = SentenceEnds(texts=["", "", "", "the", ".", "cat", "ran"],
                        ends=np.array([0, 0, 0, 0, 1, 0, 0], bool), breaks=np.array([0, 0, 0, 1, 0, 1, 0], bool))
    options = GenerationOptions(num_beams=1, max_length=10, whole_sentences=True)
    hypothesis = generate(Writer([5, 6, 4, 3, 5], 7), 1, options, start=0, eos=EOS, pad=2, sentences=ends)[0]
    assert hypothesis.token_ids == [5, 6, 4] and hypothesis.unit_weights.shape == (3, 2)
    plain = generate(Writer([5, 6, 4, 3, 5], 7), 1, GenerationOptions(num_beams=1, max_length=10), start=0, eos=EOS,
                     pad=2)[0]
    assert plain.token_ids[:3] == [5, 6, 4] and len(plain.token_ids) == 9
    with pytest.raises(OptionError, match="whole_sentences needs"):
        generate(Writer([5], 7), 1, options, start=0, eos=EOS, pad=2)
    with pytest.raises(OptionError, match="whole_sentences"):
        GenerationOptions(whole_sentences="yes")


def test_a_summarizer_and_the_command_line_take_whole_sentences(tmp_path):
    from locsum_sdk.cli import main

    summarizer = Summarizer.from_pretrained(ROOT / "engines" / "pagesum", threads=1)
    text = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8")[:3000]
    for max_length in (24, 40, 64):
        plain = summarizer.summarize(text, num_beams=2, max_length=max_length, min_length=max_length - 1)
        whole = summarizer.summarize(text, num_beams=2, max_length=max_length, min_length=max_length - 1,
                                     whole_sentences=True)
        assert plain.token_ids[: len(whole.token_ids)] == whole.token_ids
        assert whole.unit_weights.shape[0] == len(whole.token_ids) and plain.text.startswith(whole.text)
        assert whole.text == plain.text or whole.text.rstrip("\"')").endswith((".", "!", "?"))
    (tmp_path / "note.txt").write_text(text, encoding="utf-8")
    assert main(["summarize", str(tmp_path / "note.txt"), "--bundle", "pagesum", "--max-length", "40",
                 "--whole-sentences", "--json"]) == 0
