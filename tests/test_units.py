"""Paging: sentence spans, token budgets, the three policies, queries and limits."""

import random

import pytest

from conftest import document
from locsum_sdk.errors import EmptyInputError, EncodingError, InputTooLongError, OptionError
from locsum_sdk.units import Pager, PagingOptions, SpecialTokens, as_documents, split_sentences

SPECIAL = SpecialTokens()


def pager(tokenizer, **options):
    return Pager(tokenizer, SPECIAL, PagingOptions(**options))


def test_split_sentences_keeps_exact_spans():
    text = "  First one. Second one?  Third!\nA line without end\n\n\"Quoted.\" Then e.g. lower case stays.  "
    spans = split_sentences(text)
    assert [text[s:e] for s, e in spans] == [
        "First one.", "Second one?", "Third!", "A line without end", "\"Quoted.\"", "Then e.g. lower case stays.",
    ]


def test_pages_cover_the_text_in_order_within_budget(tokenizer):
    text = document(random.Random(1), 80)
    units = pager(tokenizer, page_tokens=64, max_pages=64)(as_documents(text))
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
    units = pager(tokenizer, page_tokens=256, max_pages=8, num_pages=4)(as_documents(text))
    sizes = [len(u.token_ids) for u in units]
    longest_sentence = max(len(tokenizer.encode(" " + text[s:e], add_special_tokens=False).ids)
                           for s, e in split_sentences(text))
    assert len(units) == 4
    assert max(sizes) - min(sizes) <= longest_sentence


def test_overlong_sentence_is_cut_at_token_bounds(tokenizer):
    text = " ".join(["budget"] * 300) + "."
    units = pager(tokenizer, page_tokens=32, max_pages=64)(as_documents(text))
    assert all(len(u.token_ids) <= 32 for u in units)
    assert all(set(u.text.split()) <= {"budget", "budget."} for u in units)  # cut between words
    assert " ".join(u.text for u in units) == text


def test_document_policy_never_mixes_documents(tokenizer):
    rng = random.Random(3)
    docs = [document(rng, n) for n in (1, 20, 1)]
    units = pager(tokenizer, policy="document", page_tokens=128, max_pages=64)(docs)
    assert units[0].document == 0 and units[-1].document == 2
    assert len([u for u in units if u.document == 0]) == 1
    assert len([u for u in units if u.document == 1]) > 1
    for unit in units:
        assert unit.text == docs[unit.document][unit.start : unit.end]


def test_spatial_pages_do_not_cross_documents(tokenizer):
    rng = random.Random(4)
    docs = [document(rng, 2), document(rng, 2)]
    units = pager(tokenizer, page_tokens=512, max_pages=8)(docs)
    assert [u.document for u in units] == [0, 1]


def test_discourse_policy_starts_a_page_at_each_heading(tokenizer):
    rng = random.Random(5)
    text = "\n".join(
        ["# Introduction", document(rng, 3), "2. Methods Used", document(rng, 4), "RESULTS AND COSTS", document(rng, 2)]
    )
    units = pager(tokenizer, policy="discourse", page_tokens=512, max_pages=8)(as_documents(text))
    assert [u.text.splitlines()[0] for u in units] == ["# Introduction", "2. Methods Used", "RESULTS AND COSTS"]


def test_discourse_merges_small_sections_when_over_the_page_limit(tokenizer):
    text = "\n".join(f"{i}. Section Title\nShort body {i}." for i in range(1, 13))
    units = pager(tokenizer, policy="discourse", page_tokens=128, max_pages=4)(as_documents(text))
    assert len(units) <= 4
    assert units[0].text.startswith("1. Section Title")


def test_query_is_prepended_to_every_page(tokenizer):
    text = document(random.Random(6), 40)
    query_ids = tokenizer.encode(" What was decided about the budget?", add_special_tokens=False).ids
    units = pager(tokenizer, page_tokens=64, max_pages=64)(as_documents(text), "What was decided about the budget?")
    for unit in units:
        assert list(unit.token_ids[1 : 1 + len(query_ids)]) == query_ids
        assert unit.token_ids[1 + len(query_ids)] == SPECIAL.eos
        assert len(unit.token_ids) <= 64


def test_limit_raises_or_truncates_with_a_warning(tokenizer, caplog):
    text = document(random.Random(7), 80)
    with pytest.raises(InputTooLongError, match="truncate=True"):
        pager(tokenizer, page_tokens=64, max_pages=2)(as_documents(text))
    with caplog.at_level("WARNING", logger="locsum_sdk"):
        units = pager(tokenizer, page_tokens=64, max_pages=2, truncate=True)(as_documents(text))
    assert len(units) == 2 and "truncated" in caplog.text


@pytest.mark.parametrize("bad", ["", "   \n\t", [], ["fine text.", "  "]])
def test_empty_input_is_refused(bad):
    with pytest.raises(EmptyInputError):
        as_documents(bad)


def test_bytes_must_be_utf8():
    assert as_documents("café.".encode()) == ["café."]
    with pytest.raises(EncodingError, match="UTF-8"):
        as_documents(b"caf\xe9 latin-1")


@pytest.mark.parametrize("options", [dict(policy="chapters"), dict(max_pages=0), dict(num_pages=20, max_pages=8)])
def test_bad_paging_options(tokenizer, options):
    with pytest.raises(OptionError):
        pager(tokenizer, **options)
