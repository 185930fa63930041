"""What the decoding loop keeps of each beam from step to step (its words, the keywords it has written, its content
words' counts, the n-grams written) against the same filters read from each beam's whole summary, as they were
defined: beams reordered at random between steps, random pieces with mixed ones ("s.The"), every filter's output
equal to the last bit."""

import random
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from locsum_sdk.generation import SeenNgrams
from locsum_sdk.keywords import KeywordBonus, going_on
from locsum_sdk.repeats import WordRepeats
from locsum_sdk.words import CONTENT_LETTERS, BeamWords, Pieces, Spelled


def mixed_pieces(rng: random.Random, vocab: int) -> Pieces:
    """Special 0-1, then letters (some opening a word), punctuation, and mixed pieces that end a word and start
    one ("s.the"), end one ("s,") or start one (".the")."""
    letters: list[str | None] = [None, None]
    opens, ends, starts = [False, False], {}, {}
    for token in range(2, vocab):
        roll = rng.random()
        text = "".join(rng.choices("abc", k=rng.randint(1, 4)))
        if roll < 0.2:
            letters.append(None)
            if rng.random() < 0.5:
                ends[token] = text[:2]
            if rng.random() < 0.5:
                starts[token] = text[-2:]
        else:
            letters.append(text)
        opens.append(letters[-1] is not None and roll > 0.6)
    opened = np.array(opens, dtype=bool)
    return Pieces(letters, opened, np.array([t is not None for t in letters]) & ~opened, ends, starts,
                  frozenset({0, 1}))


def reference_spell(pieces: Pieces, sequence: list[int]) -> list[Spelled]:
    """The words of a whole sequence, read in one pass as `Pieces.spell` defines them."""
    found, text, tokens = [], [], []
    for token in sequence:
        piece = pieces.letters[token]
        if piece is not None and not pieces.opens[token]:
            text.append(piece)
            tokens.append(token)
            continue
        if piece is None and token in pieces.ends:
            text.append(pieces.ends[token])
            tokens.append(token)
        if text:
            found.append(Spelled("".join(text), tuple(tokens)))
        if piece is not None:
            text, tokens = [piece], [token]
        else:
            text, tokens = ([pieces.starts[token]], [token]) if token in pieces.starts else ([], [])
    if text:
        found.append(Spelled("".join(text), tuple(tokens)))
    return found


def reference_bonus(bonus: KeywordBonus, log_probs: np.ndarray, sequences: np.ndarray) -> None:
    """The keyword bonus read from each beam's whole summary."""
    for b, k in np.ndindex(*sequences.shape[:2]):
        sequence = sequences[b, k, 1:].tolist()
        spelled = reference_spell(bonus.pieces, sequence)
        words = {word.text for word in spelled}
        opened = {word.tokens[0] for word in spelled
                  if bonus.pieces.letters[word.tokens[0]] is not None and bonus.pieces.opens[word.tokens[0]]}
        last = spelled[-1] if spelled and sequence and spelled[-1].tokens[-1] == sequence[-1] else None
        word = going_on(bonus.pieces, last)
        spellings = bonus.spellings[b]
        tokens = [t for t, found in spellings.get((), {}).items() if t not in opened and not found <= words]
        if word:
            tokens += [t for t, found in spellings.get(word, {}).items() if not found <= words]
        log_probs[b, k, tokens] += bonus.bonus


def reference_repeats(repeats: WordRepeats, log_probs: np.ndarray, sequences: np.ndarray, penalty: float) -> None:
    """The word repeat penalty read from each beam's whole summary."""
    for b, k in np.ndindex(*sequences.shape[:2]):
        spelled = reference_spell(repeats.pieces, sequences[b, k, 1:].tolist())
        for word, count in Counter(w.text for w in spelled if len(w.text) >= CONTENT_LETTERS).items():
            if word in repeats.openers:
                log_probs[b, k, repeats.openers[word]] -= np.float32(penalty * count)


def reference_ngrams(log_probs: np.ndarray, sequences: np.ndarray, size: int, spared: np.ndarray | None) -> None:
    """n-gram blocking read from each beam's whole summary."""
    if sequences.shape[-1] < size:
        return
    for b, k in np.ndindex(*sequences.shape[:2]):
        seq = sequences[b, k].tolist()
        prefix = tuple(seq[len(seq) - size + 1:])
        banned = [seq[i + size - 1] for i in range(len(seq) - size + 1) if tuple(seq[i:i + size - 1]) == prefix]
        log_probs[b, k, [t for t in banned if spared is None or not spared[t]]] = -np.inf


def keyword_spellings(rng: random.Random, pieces: Pieces) -> dict:
    """Two or three keywords spelled as a first piece that opens a word and letters that go on with it."""
    firsts = [t for t, text in enumerate(pieces.letters) if text is not None and pieces.opens[t]]
    nexts = [t for t, text in enumerate(pieces.letters) if text is not None and not pieces.opens[t]]
    steps: dict = {}
    for _ in range(rng.randint(2, 3)):
        ids = (rng.choice(firsts), *rng.choices(nexts, k=rng.randint(0, 2)))
        word = "".join(pieces.letters[t] for t in ids)
        for n, token in enumerate(ids):
            steps.setdefault(ids[:n], {}).setdefault(token, set()).add(word)
    return {prefix: {t: frozenset(w) for t, w in following.items()} for prefix, following in steps.items()}


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), batch=st.integers(1, 2), beams=st.integers(1, 4), size=st.integers(1, 4))
def test_what_a_step_keeps_of_each_beam_is_what_its_whole_summary_holds(seed, batch, beams, size):
    rng = random.Random(seed)
    vocab = rng.randint(6, 24)
    pieces = mixed_pieces(rng, vocab)
    firsts = [t for t, text in enumerate(pieces.letters) if text is not None and pieces.opens[t]]
    nexts = [t for t, text in enumerate(pieces.letters) if text is not None and not pieces.opens[t]]
    if not firsts or not nexts:
        return
    bonus = KeywordBonus(pieces, [keyword_spellings(rng, pieces) for _ in range(batch)], 1.5)
    repeats = WordRepeats(pieces)
    spared = np.array([rng.random() < 0.3 for _ in range(vocab)]) if rng.random() < 0.5 else None
    words, keywords = BeamWords(pieces, batch, beams), bonus.follow(batch, beams)
    counts = repeats.follow(batch, beams, 0.7)
    ngrams = SeenNgrams(size, spared)
    sequences = np.zeros((batch, beams, 1), np.int64)
    narrow = rng.sample(range(vocab), k=min(vocab, 4))  # few tokens: words, keywords and n-grams come back
    for step in range(rng.randint(1, 40)):
        beam_index = None if beams == 1 else np.array([[rng.randrange(beams) for _ in range(beams)]
                                                       for _ in range(batch)])
        tokens = np.array([[rng.choice(narrow if rng.random() < 0.7 else range(vocab)) for _ in range(beams)]
                           for _ in range(batch)])
        order = np.arange(beams)[None].repeat(batch, 0) if beam_index is None else beam_index
        sequences = np.concatenate([sequences[np.arange(batch)[:, None], order], tokens[:, :, None]], axis=-1)
        words.advance(tokens, beam_index)
        keywords.advance(words, beam_index)
        counts.advance(words, beam_index)
        base = np.array(np.random.default_rng(step).standard_normal((batch, beams, vocab)), np.float32)
        got, want = base.copy(), base.copy()
        keywords.apply(got, words)
        reference_bonus(bonus, want, sequences)
        counts.apply(got, words)
        reference_repeats(repeats, want, sequences, 0.7)
        ngrams.apply(got, sequences)
        reference_ngrams(want, sequences, size, spared)
        assert np.array_equal(got, want), f"step {step}"
        for b, k in np.ndindex(batch, beams):
            assert pieces.spell(sequences[b, k, 1:].tolist()) == reference_spell(pieces, sequences[b, k, 1:].tolist())


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 4), st.integers(1, 150))
def test_token_rows_are_the_beams_reordered_then_extended(seed, batch, beams, steps):
    """`TokenRows` (written in place, a buffer that doubles) against the definition: every step, the rows reordered
    by the step's sources, then each extended by its token; past the buffer's first 64 steps too."""
    from locsum_sdk.generation import TokenRows

    rng = np.random.default_rng(seed)
    rows, reference = TokenRows(batch, beams, 7), np.full((batch, beams, 1), 7, dtype=np.int64)
    for _ in range(steps):
        source = rng.integers(0, beams, (batch, beams)) if rng.random() < 0.7 else None
        tokens = rng.integers(0, 50, (batch, beams))
        if source is not None:
            reference = reference[np.arange(batch)[:, None], source]
        reference = np.concatenate([reference, tokens[:, :, None]], axis=-1)
        rows.append(tokens, source)
        assert np.array_equal(rows.array, reference)
