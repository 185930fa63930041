"""Paragraph units (blank-line blocks, runs of whole speaker turns) and their tf-idf graph."""

import numpy as np
import pytest

from locsum_sdk.errors import InputTooLongError
from locsum_sdk.paragraphs import ParagraphOptions, ParagraphPager, tfidf_graph
from locsum_sdk.units import SpecialTokens


def pager(tokenizer, **options):
    return ParagraphPager(tokenizer, SpecialTokens(), ParagraphOptions(**options))


def test_blocks_are_paragraphs_and_long_ones_are_cut(tokenizer):
    text = "The council met. It voted.\n\nThe library opens in spring.\n  \nBudgets were cut. " + "Costs rose. " * 40
    units = pager(tokenizer, paragraph_tokens=48)([text])
    assert [u.text for u in units[:2]] == ["The council met. It voted.", "The library opens in spring."]
    assert len(units) > 3 and all(len(u.token_ids) <= 48 for u in units)
    assert all(u.token_ids[0] == 0 and u.token_ids[-1] == 2 and u.head == 1 for u in units)  # <s> text </s>


def test_a_dialogue_groups_whole_turns(tokenizer):
    turns = [(f"{name}: " + "The committee budget report. " * n).strip() for name, n in
             [("Anna", 1), ("Bob", 1), ("Anna", 1), ("Bob", 12), ("Anna", 1)]]
    text = "\n".join(turns)
    size = len(pager(tokenizer, paragraph_tokens=128)([turns[0]])[0].text_ids)  # one short turn's tokens
    units = pager(tokenizer, paragraph_tokens=2 * size + 2 + 1)([text])  # room for two short turns, not three
    assert units[0].text == "\n".join(turns[:2])
    assert units[1].text == turns[2]  # the next turn is too long to join it, so it starts a paragraph
    assert len(units) > 4 and all(len(u.token_ids) <= 2 * size + 3 for u in units)
    assert units[-1].text == turns[-1]  # the long turn had paragraphs of its own


def test_the_query_is_not_in_any_paragraph_but_must_fit_half_of_one(tokenizer):
    paging = pager(tokenizer, paragraph_tokens=64)
    units = paging.pages(["The council met. It voted."], paging.query_ids("What did the council do?"))
    assert units[0].head == 1 and units[0].text_ids == units[0].token_ids[1:-1]
    with pytest.raises(InputTooLongError, match="half a unit"):
        paging.query_ids("What did the council decide about the library and the budget and the roads this year? " * 3)


def test_the_graph_is_the_cosine_of_tfidf_vectors(tokenizer):
    units = pager(tokenizer)(["budget budget report\n\nbudget meeting\n\ncity school"])
    graph = tfidf_graph([u.text_ids for u in units])
    assert graph.shape == (3, 3) and np.allclose(np.diag(graph), 1.0, atol=1e-6) and np.allclose(graph, graph.T)
    assert graph[0, 1] > 0 and graph[0, 2] == 0 and graph[1, 2] == 0
