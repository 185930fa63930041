"""Paging: sentence spans, token budgets, the three policies, queries and limits."""

import random

import pytest
from conftest import document

from locsum_sdk.errors import EmptyInputError, EncodingError, InputError, InputTooLongError, OptionError
from locsum_sdk.units import Pager, PagingOptions, SpecialTokens, as_documents, split_sentences

SPECIAL = SpecialTokens()


def pager(tokenizer, max_tokens=None, **options):
    return Pager(tokenizer, SPECIAL, PagingOptions(**options), max_tokens)


def test_split_sentences_keeps_exact_spans():
    text = "  First one. Second one?  Third!\nA line without end\n\n\"Quoted.\" Then e.g. lower case stays.  "
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == [
        "First one.", "Second one?", "Third!", "A line without end", "\"Quoted.\"", "Then e.g. lower case stays.",
    ]


def test_pages_cover_the_text_in_order_within_budget(tokenizer):
    text = document(random.Random(1), 80)
    units = pager(tokenizer, page_tokens=64)(as_documents(text))
    assert len(units) > 3
    for unit in units:
        assert len(unit.token_ids) <= 64
        assert unit.token_ids[0] == SPECIAL.bos and unit.token_ids[-1] == SPECIAL.eos
        assert unit.text == text[unit.start : unit.end]
    assert [u.start for u in units] == sorted(u.start for u in units)
    joined = " ".join(u.text for u in units).split()
    assert joined == text.split()


def test_spatial_pages_have_near_equal_length(tokenizer):
    text = document(random.Random(2), 30)
    units = pager(tokenizer, page_tokens=256, num_pages=4)(as_documents(text))
    sizes = [len(u.token_ids) for u in units]
    longest_sentence = max(len(tokenizer.encode(" " + text[s:e], add_special_tokens=False).ids)
                           for s, e in split_sentences(text))
    assert len(units) == 4
    assert max(sizes) - min(sizes) <= longest_sentence


def test_overlong_sentence_is_cut_at_token_bounds(tokenizer):
    text = " ".join(["budget"] * 300) + "."
    units = pager(tokenizer, page_tokens=32)(as_documents(text))
    assert all(len(u.token_ids) <= 32 for u in units)
    assert all(set(u.text.split()) <= {"budget", "budget."} for u in units)  # cut between words
    assert " ".join(u.text for u in units) == text


def test_document_policy_never_mixes_documents(tokenizer):
    rng = random.Random(3)
    docs = [document(rng, n) for n in (1, 20, 1)]
    units = pager(tokenizer, policy="document", page_tokens=128)(docs)
    assert units[0].document == 0 and units[-1].document == 2
    assert len([u for u in units if u.document == 0]) == 1
    assert len([u for u in units if u.document == 1]) > 1
    for unit in units:
        assert unit.text == docs[unit.document][unit.start : unit.end]


def test_spatial_pages_do_not_cross_documents(tokenizer):
    rng = random.Random(4)
    docs = [document(rng, 2), document(rng, 2)]
    units = pager(tokenizer, page_tokens=512)(docs)
    assert [u.document for u in units] == [0, 1]


def test_discourse_policy_starts_a_page_at_each_heading(tokenizer):
    rng = random.Random(5)
    text = "\n".join(
        ["# Introduction", document(rng, 3), "2. Methods Used", document(rng, 4), "RESULTS AND COSTS", document(rng, 2)]
    )
    units = pager(tokenizer, policy="discourse", page_tokens=512)(as_documents(text))
    assert [u.text.splitlines()[0] for u in units] == ["# Introduction", "2. Methods Used", "RESULTS AND COSTS"]


def test_discourse_merges_small_sections_when_over_the_page_limit(tokenizer):
    text = "\n".join(f"{i}. Section Title\nShort body {i}." for i in range(1, 13))
    units = pager(tokenizer, 4 * 120, policy="discourse", page_tokens=128)(as_documents(text))
    assert len(units) <= 4
    assert units[0].text.startswith("1. Section Title")


def test_query_is_prepended_to_every_page(tokenizer):
    text = document(random.Random(6), 40)
    query_ids = tokenizer.encode(" What was decided about the budget?", add_special_tokens=False).ids
    units = pager(tokenizer, page_tokens=64)(as_documents(text), "What was decided about the budget?")
    for unit in units:
        assert list(unit.token_ids[1 : 1 + len(query_ids)]) == query_ids
        assert unit.token_ids[1 + len(query_ids)] == SPECIAL.eos
        assert len(unit.token_ids) <= 64


@pytest.mark.parametrize("bad", ["", "   \n\t", [], ["fine text.", "  "]])
def test_empty_input_is_refused(bad):
    with pytest.raises(EmptyInputError):
        as_documents(bad)


def test_bytes_must_be_utf8():
    assert as_documents("café.".encode()) == ["café."]
    with pytest.raises(EncodingError, match="UTF-8"):
        as_documents(b"caf\xe9 latin-1")


@pytest.mark.parametrize("options", [
    dict(policy="chapters"), dict(policy=None), dict(page_tokens=4), dict(page_tokens=64.0), dict(page_tokens="64"),
    dict(page_tokens=True), dict(num_pages=0), dict(num_pages=1.5),
])
def test_bad_paging_options(tokenizer, options):
    with pytest.raises(OptionError, match=next(iter(options))):
        pager(tokenizer, **options)


def test_num_pages_beyond_the_sentences_makes_one_page_per_sentence(tokenizer):
    units = pager(tokenizer, page_tokens=64, num_pages=10**9)(["One. Two. Three."])
    assert [u.text for u in units] == ["One.", "Two.", "Three."]


@pytest.mark.parametrize("text", ["budget " * 5000, ("budget. " * 3000).lower(), "x" * 20000, "é" * 9000])
def test_long_sentences_and_words_are_paged_whole(tokenizer, text):
    units = pager(tokenizer, page_tokens=64)([text])
    assert all(len(u.token_ids) <= 64 for u in units)
    assert "".join(u.text for u in units).replace(" ", "") == text.replace(" ", "")
    assert all(u.text == text[u.start : u.end] for u in units)


def test_pieces_of_a_long_sentence_tokenize_as_the_whole(tokenizer):
    text = " ".join(["the committee discussed the budget"] * 800)  # one 28,000-character sentence
    units = pager(tokenizer, page_tokens=512)([text])
    whole = tokenizer.encode(" " + text, add_special_tokens=False).ids
    assert [t for u in units for t in u.text_ids] == whole


@pytest.mark.parametrize("bad", ["\0\0", "\u200b\u200b \ufeff", "\u202e\u2066\n", "\x07\x1b\x7f", "\u00ad\u2060",
                                 "\u0310\u0301", " \u20dd\u0903 ", "\ue000\U000f0000"])
def test_text_without_visible_characters_is_empty(bad):
    with pytest.raises(EmptyInputError, match="visible"):
        as_documents(bad)


@pytest.mark.parametrize("good", ["e\u0301", "\u0301e", "\u0915\u093f", "\u2603", "7", "\u3002"])
def test_a_base_character_with_or_without_marks_is_text(good):
    assert as_documents(good) == [good]


def test_lone_surrogates_are_refused():
    with pytest.raises(EncodingError, match="surrogate"):
        as_documents("meeting notes \ud800 more")


@pytest.mark.parametrize("bad", [{"a": "text"}, 5, None, ["text", 3], {"text"}])
def test_other_types_are_refused(bad):
    with pytest.raises(InputError):
        as_documents(bad)


@pytest.mark.parametrize("newline", ["\r\n", "\r", "\u2028"])
def test_every_kind_of_line_break_makes_the_same_turns_blocks_and_sentences(tokenizer, newline):
    from locsum_sdk.kinds.dyle import SnippetOptions, SnippetPager
    from locsum_sdk.paragraphs import ParagraphOptions, ParagraphPager

    dialogue = "\n".join(f"{name}: " + "The budget report was late. " * n for name, n in
                         [("Anna", 1), ("Bob", 3), ("Anna", 1), ("Carl", 2), ("Bob", 1)])
    prose = "The council met. It voted.\n\nThe library opens in spring.\n  \nBudgets were cut.\nCosts rose."
    pagers = [SnippetPager(tokenizer, SPECIAL, SnippetOptions(snippet_tokens=64)),
              ParagraphPager(tokenizer, SPECIAL, ParagraphOptions(paragraph_tokens=24)),
              pager(tokenizer, page_tokens=24, policy="spatial")]
    for text in (dialogue, prose):
        other = text.replace("\n", newline)
        for make in pagers:
            lf, changed = make([text]), make([other])
            assert [u.text.replace(newline, "\n") for u in changed] == [u.text for u in lf]
            assert all(other[u.start:u.end] == u.text for u in changed)


@pytest.mark.parametrize("policy", ["spatial", "document", "discourse"])
def test_a_prompt_that_leaves_no_room_for_text_is_refused_by_name(tokenizer, policy):
    prompt = SpecialTokens(unit_head=tuple(range(3, 23)), unit_tail=tuple(range(23, 43)), query_head=(5, 6))
    text = document(random.Random(2), 30)
    with pytest.raises(OptionError, match="page_tokens=40 leaves no tokens for the text.*takes 40"):
        Pager(tokenizer, prompt, PagingOptions(policy=policy, page_tokens=40))(as_documents(text))
    roomy = Pager(tokenizer, prompt, PagingOptions(policy=policy, page_tokens=64))
    assert all(len(u.text_ids) <= 24 for u in roomy(as_documents(text)))
    query = "budget"
    while len(tokenizer.encode(" " + query + " budget", add_special_tokens=False).ids) <= 64 // 2:
        query += " budget"  # within half a unit, but not beside a 40-token prompt
    with pytest.raises(InputTooLongError, match="shorten the query or raise page_tokens"):
        roomy(as_documents(text), query=query)
