"""ROUGE, bootstrap intervals, baselines and `locsum eval`."""

import dataclasses
import json
import random

import pytest

pytest.importorskip("rouge_score")

from conftest import SHARED_DATA, document  # noqa: E402

from locsum_sdk.cli import main  # noqa: E402
from locsum_sdk.evaluation import (  # noqa: E402
    EvalExample,
    bootstrap,
    content_words,
    distinct_flags,
    evaluate,
    input_specific_words,
    made_up_counts,
    oracle,
    read_examples,
    repeated_shares,
    rouge_scores,
    run_baseline,
    set_words,
    shared_counts,
    specific_counts,
)


def examples(n=12, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        doc = document(rng, 20)
        reference = " ".join(doc.split(". ")[3:5])
        out.append(EvalExample(f"e{i}", [doc], None, reference))
    return out


def test_rouge_is_100_for_the_reference_and_lsum_uses_sentences():
    (row,) = rouge_scores(["The cat sat. The dog ran."], ["The cat sat. The dog ran."])
    assert all(v == pytest.approx(100) for v in row.values())
    (row,) = rouge_scores(["The dog ran. The cat sat."], ["The cat sat. The dog ran."])
    assert row["rougeLsum"] == pytest.approx(100) and row["rougeL"] < 100


def test_bootstrap_interval_brackets_the_mean():
    rows = [{m: float(v) for m in ("rouge1", "rouge2", "rougeL", "rougeLsum")} for v in range(0, 100, 5)]
    ci = bootstrap(rows)["rouge1"]
    assert ci["low"] < ci["mean"] < ci["high"] and ci["mean"] == pytest.approx(47.5)


def test_input_specific_words_follow_their_definition():
    common = "meeting agenda project "  # in every input: never specific
    texts = [common + "roof budget", common + "roof crane", common + "roof", common + "library", common + "garden",
             common + "parking", common + "canteen", common + "lighting"]
    data = [EvalExample(f"e{i}", [text], None, "x") for i, text in enumerate(texts)]
    data.append(EvalExample("again", [texts[0]], "Another query on the same input?", "x"))  # counted once
    specific = input_specific_words(data)
    # 8 distinct inputs: a word of input 0 is specific when fewer than 15% of the 7 others (1.05) contain it
    assert specific[0] == {"budget"}  # "roof" is in 2 others (29%); "meeting" in all
    assert specific[3] == {"library"} and specific[8] == specific[0]
    assert content_words("The Roof's roof, a budget of 2024 élan!") == {"roof", "budget", "élan"}
    assert specific_counts(["The budget for the roof, and the budget again.", "Library hours.", "Nothing here."],
                           input_specific_words(data[:3])) == [1, 0, 0]
    report = evaluate({"lead": ["roof budget"] * len(data)}, data)
    assert report["lead"]["specific_words"]["mean"] == pytest.approx(2 / 9)  # input 0 and its second query
    assert report["reference"]["specific_words"]["mean"] == 0


def test_words_repeated_count_each_repeat_of_an_earlier_word_of_the_summary():
    assert repeated_shares(["The budget of the budget.", "Daniel Hannah Daniel Priya Daniel.", "A cat sat.", ""]) == [
        50.0, 40.0, 0.0, 0.0]  # words of four or more letters only; a summary without one repeats nothing
    assert repeated_shares(["Roof, ROOF and roof's repair"]) == [50.0]  # lowercased runs of letters: roof x3, repair
    data = [EvalExample("a", ["The roof budget and the crane."], None, "The roof and the roof again.")]
    report = evaluate({"loop": ["The crane, the crane, the crane."]}, data)
    assert report["loop"]["repeated_words"]["mean"] == pytest.approx(200 / 3)
    assert report["reference"]["repeated_words"]["mean"] == pytest.approx(100 / 3)  # roof roof again


def test_specific_words_also_in_the_reference_are_those_both_hold():
    common = "meeting agenda "
    texts = [common + "roof budget crane", common + "library", common + "garden", common + "parking"]
    data = [EvalExample(f"e{i}", [text], None, ref) for i, (text, ref) in
            enumerate(zip(texts, ["The roof budget.", "Library.", "x", "x"]))]
    specific = input_specific_words(data)
    assert shared_counts(["Roof, crane and budget; the meeting.", "Garden.", "x", "x"], specific,
                         [ex.reference for ex in data]) == [2, 0, 0, 0]  # crane: not in the reference
    report = evaluate({"model": ["Roof, crane and budget.", "Library hours.", "x", "x"]}, data)
    assert report["model"]["specific_in_reference"]["mean"] == pytest.approx(3 / 4)
    assert report["reference"]["specific_in_reference"]["mean"] == report["reference"]["specific_words"]["mean"]


def test_made_up_words_are_those_no_text_of_the_set_holds():
    data = [EvalExample("a", ["The crew reached Ganymede."], "Where did the crew go?", "They went to Ganymede."),
            EvalExample("b", ["A sandwich shop opened."], None, "A shop opened downtown.")]
    real = set_words(data)
    assert {"ganymede", "crew", "where", "downtown", "sandwich"} <= real and "went" in real
    assert made_up_counts(["The crew reached Ganymedriveration and Ganymedriveration.", "A sandwichier shop, "
                           "a cat."], real) == [1, 1]  # distinct words of four or more letters: not "cat"
    assert made_up_counts(["The sandwichier cafe."], real) == [2]
    report = evaluate({"model": ["Ganymedriveration.", "A sandwich shop."], "lead": ["The crew.", "A shop."]}, data,
                      known=["ganymedriveration"])
    assert report["model"]["made_up_words"]["mean"] == 0 and report["lead"]["made_up_words"]["mean"] == 0
    report = evaluate({"model": ["Ganymedriveration.", "A sandwich shop."]}, data)
    assert report["model"]["made_up_words"]["mean"] == 0.5 and "made_up_words" not in report["reference"]


def test_distinct_summaries_count_those_no_example_with_another_input_or_query_repeats():
    data = examples(4)
    assert distinct_flags(["A cat.", "a  CAT.", "A dog.", "A bird."], data) == [0.0, 0.0, 100.0, 100.0]
    asked = [data[0], dataclasses.replace(data[0], id="again"), dataclasses.replace(data[0], query="Who?"), data[1]]
    assert distinct_flags(["A cat."] * 2 + ["A dog."] * 2, asked) == [100.0, 100.0, 0.0, 0.0]  # a repeated example
    assert distinct_flags(["A cat."] * 3 + ["A dog."], asked) == [0.0, 0.0, 0.0, 100.0]  # another query: not
    report = evaluate({"same": ["The same words."] * 4, "own": [f"Summary {i}." for i in range(4)]}, data)
    assert report["same"]["distinct"]["mean"] == 0 and report["own"]["distinct"]["mean"] == 100
    assert report["reference"]["distinct"]["mean"] == 100


def test_oracle_beats_lead_and_random():
    data = examples()
    report = evaluate({name: run_baseline(name, data) for name in ("lead", "random", "oracle")}, data)
    assert report["oracle"]["rouge2"]["mean"] > report["lead"]["rouge2"]["mean"]
    assert report["oracle"]["rouge1"]["mean"] > report["random"]["rouge1"]["mean"]
    assert oracle(data[0], 10, random.Random(0))


def test_locsum_eval_writes_outputs_and_report(bundle_dir, tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": e.id, "documents": e.documents, "query": "What?", "summary": e.reference})
                            + "\n" for e in examples(4)))
    code = main(["eval", "--bundle", str(bundle_dir), "--data", str(data), "--baselines", "lead", "--quiet",
                 "--output", str(tmp_path / "out.jsonl"), "--report", str(tmp_path / "report.json"),
                 "--max-length", "8"])
    assert code == 0
    assert "rougeLsum" in (printed := capsys.readouterr().out) and "specific_words" in printed
    assert "made_up_words" in printed and "repeated_words" in printed and "specific_in_reference" in printed
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and set(rows[0]) >= {"id", "reference", "model", "lead"}
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report) == {"model", "lead", "reference"}
    assert set(report["reference"]) == {"specific_words", "distinct", "repeated_words", "specific_in_reference"}
    assert {"rouge1", "specific_words", "made_up_words"} <= set(report["model"])
    assert "specific_words" in rows[0]["model"] and "made_up_words" in rows[0]["model"]


def test_locsum_eval_counts_a_word_list_as_real(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"documents": ["The crew reached Ganymede."], "summary": "The crew."}) + "\n")
    words = tmp_path / "words.txt"
    words.write_text("crew\nreached\n")
    assert main(["eval", "--data", str(data), "--quiet", "--baselines", "lead", "--real-words", str(words),
                 "--report", str(tmp_path / "report.json")]) == 0
    assert json.loads((tmp_path / "report.json").read_text())["lead"]["made_up_words"]["mean"] == 0
    words.write_bytes(b"\xff")
    assert main(["eval", "--data", str(data), "--quiet", "--baselines", "lead", "--real-words", str(words)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


@pytest.mark.parametrize(("arguments", "message"), [
    (["--bundle", "BUNDLE", "--baselines", "lead,none"], "unknown baseline(s) ['none']"),
    (["--baselines", ""], "nothing to evaluate"),
])
def test_locsum_eval_refuses_what_it_cannot_score_before_summarizing(bundle_dir, tmp_path, capsys, monkeypatch,
                                                                     arguments, message):
    from locsum_sdk import Summarizer

    def refuse(*args, **kwargs):
        raise AssertionError("a bundle was loaded before the options were checked")

    monkeypatch.setattr(Summarizer, "from_pretrained", refuse)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"documents": ["Some text here."], "summary": "Text."}) + "\n")
    arguments = [str(bundle_dir) if a == "BUNDLE" else a for a in arguments]
    assert main(["eval", "--data", str(data), "--quiet", *arguments]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} (the shared data) is not here")
def test_baselines_on_real_qmsum(capsys):
    assert main(["eval", "--data", str(SHARED_DATA / "qmsum" / "test.jsonl"), "--limit", "3", "--baselines",
                 "lead,oracle"]) == 0
    assert "oracle" in capsys.readouterr().out


@pytest.mark.parametrize("line,message", [
    (b"{not json", "not a JSON line"), (b"[1]", "not an object"), (b'{"documents": ["a"]}', "'summary'"),
    (b'{"documents": [], "summary": "s"}', "'documents'"),
    (b'{"documents": ["a"], "summary": "s", "query": 5}', "query"),
    (b'{"documents": ["\\ud800"], "summary": "s"}', "lone surrogate"), (b"\xff\xfe", "not a JSON line"),
    (b'{"documents": ["a"], "summary": " \\n "}', "'summary' is empty"),
])
def test_bad_data_lines_name_file_and_line(tmp_path, line, message):
    from locsum_sdk.errors import DataError

    path = tmp_path / "data.jsonl"
    first = b'{"documents": ["Fine text."], "summary": "Fine."}\n'
    path.write_bytes(first + line + b"\n")
    with pytest.raises(DataError, match=f"data.jsonl:2: .*{message}"):
        read_examples(path)


def test_empty_data_file_and_bad_limits(tmp_path):
    from locsum_sdk.errors import DataError, OptionError

    path = tmp_path / "data.jsonl"
    path.write_text("\n\n")
    with pytest.raises(DataError, match="no examples"):
        read_examples(path)
    for limit in (0, -1, 1.5, True):
        with pytest.raises(OptionError, match="limit"):
            read_examples(path, limit)


def test_a_vocabularys_whole_words_are_its_word_starting_pieces_of_letters_whatever_marks_them():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    from locsum_sdk.evaluation import vocabulary_words

    pieces = ["<unk>", "budget", "roof", "ing", "café", "1234", "<0x41>"]
    byte_level = Tokenizer(models.BPE({("Ġ" + p if i in (1, 2, 5) else p): i for i, p in enumerate(pieces)}, []))
    byte_level.pre_tokenizer = pre_tokenizers.ByteLevel()
    byte_level.decoder = decoders.ByteLevel()
    assert vocabulary_words(byte_level) == {"budget", "roof"}  # "1234" is no word; "ing" opens none
    marked = {("▁" + p if i in (1, 2, 4, 5) else p): i for i, p in enumerate(pieces)}
    sentencepiece = Tokenizer(models.BPE(marked, [], unk_token="<unk>", byte_fallback=True))
    sentencepiece.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    sentencepiece.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback()])
    assert vocabulary_words(sentencepiece) == {"budget", "roof", "café"}
    plain = Tokenizer(models.WordLevel({"budget": 0, "[UNK]": 1}, unk_token="[UNK]"))
    assert vocabulary_words(plain) == frozenset()  # no word starts marked: no words claimed
