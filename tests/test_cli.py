"""`locsum summarize` prints a summary (or JSON with pages and weights); errors exit 2 with one line."""

import json
import random

import pytest
from conftest import document

from locsum_sdk.cli import main


def test_summarize_files_as_documents_json(bundle_dir, tmp_path, capsys):
    rng = random.Random(0)
    files = []
    for i in range(2):
        files.append(tmp_path / f"doc{i}.txt")
        files[-1].write_text(document(rng, 8))
    code = main(["summarize", *map(str, files), "--bundle", str(bundle_dir), "--json", "--num-beams", "2",
                 "--policy", "document", "--query", "What was decided?", "--known-words"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {u["document"] for u in out["units"]} == {0, 1}
    assert len(out["unit_weights"]) == len(out["token_ids"])
    assert set(out["timings"]) == {"paging", "select", "encode", "decode", "total"}
    assert out["kind"] == "pagesum"


def test_errors_are_one_line_and_exit_2(bundle_dir, tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin-1"))
    assert main(["summarize", str(bad), "--bundle", str(bundle_dir)]) == 2
    assert "not valid UTF-8" in capsys.readouterr().err
    assert main(["summarize", str(tmp_path / "absent.txt"), "--bundle", str(bundle_dir)]) == 2
    assert "absent.txt: no such file" in capsys.readouterr().err
    assert main(["summarize", str(tmp_path), "--bundle", str(bundle_dir)]) == 2
    err = capsys.readouterr().err
    assert "is a folder; give its files" in err and "Errno" not in err and len(err.splitlines()) == 1


def test_an_empty_or_binary_file_is_named_and_options_are_not_abbreviated(bundle_dir, tmp_path, capsys):
    good, empty, binary = tmp_path / "minutes.txt", tmp_path / "empty.txt", tmp_path / "scan.pdf"
    good.write_text("The board met on Monday to approve the budget.", encoding="utf-8")
    empty.write_bytes(b" \n")
    binary.write_bytes(b"%PDF-1.7\n\xe2\xe3\xcf\xd3")
    assert main(["summarize", str(good), str(empty), "--bundle", str(bundle_dir)]) == 2
    assert f"{empty} is empty" in capsys.readouterr().err
    assert main(["summarize", str(binary), "--bundle", str(bundle_dir)]) == 2
    assert f"{binary} is a damaged or truncated PDF" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_code:
        main(["summarize", str(good), "--bundle", str(bundle_dir), "--num-beam", "2"])
    assert exit_code.value.code == 2 and "unrecognized arguments: --num-beam 2" in capsys.readouterr().err


def test_any_kinds_unit_options_are_given_with_unit(dyle_bundle_dir, tmp_path, capsys):
    meeting = tmp_path / "meeting.txt"
    meeting.write_text("\n".join(f"{name}: {document(random.Random(i), 2)}" for i, name in enumerate("ABABAB")))
    code = main(["summarize", str(meeting), "--bundle", str(dyle_bundle_dir), "--json", "--policy", "turn",
                 "--unit", "top_k=2", "--max-length", "6"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "dyle" and len(out["units"]) == 2 and all("score" in u for u in out["units"])
    assert main(["summarize", str(meeting), "--bundle", str(dyle_bundle_dir), "--unit", "top_k"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err
    assert main(["summarize", str(meeting), "--bundle", str(dyle_bundle_dir), "--unit", "page_tokens=64"]) == 2
    assert "page_tokens is not a unit option of a dyle model" in capsys.readouterr().err
    assert main(["summarize", str(meeting), "--bundle", str(dyle_bundle_dir), "--unit", "foo=1"]) == 2
    error = capsys.readouterr().err
    assert "foo is not a unit option" in error and "top_k" in error and "num_beams" not in error  # unit options only
    assert main(["summarize", str(meeting), "--bundle", str(dyle_bundle_dir), "--unit", "num_beams=2"]) == 2
    assert "give it as --num-beams" in capsys.readouterr().err


def test_verbose_and_quiet_on_every_command(capsys):
    from locsum_sdk.cli import build_parser

    parser = build_parser()
    for command in ("summarize", "eval", "export", "batch", "bench", "profile"):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        help_text = capsys.readouterr().out
        assert "--verbose" in help_text and "--quiet" in help_text, command
    assert parser.parse_args(["-v", "profile"]).verbose == 1  # before the command ...
    assert parser.parse_args(["profile", "-vv"]).verbose == 2
    assert parser.parse_args(["profile", "-q"]).quiet is True  # ... or after it
    assert parser.parse_args(["profile"]).quiet is False
    with pytest.raises(SystemExit):
        main(["-v", "profile", "--quiet"])
    assert "exclude each other" in capsys.readouterr().err


def test_verbose_logs_each_stage_and_vv_each_step(bundle_dir, tmp_path, caplog, capsys):
    import logging

    text = tmp_path / "report.txt"
    text.write_text(document(random.Random(3), 12))
    command = ["summarize", str(text), "--bundle", str(bundle_dir), "--max-length", "6", "--page-tokens", "32"]
    try:
        assert main(command) == 0
        assert not [r for r in caplog.records if r.name == "locsum_sdk" and r.levelno < logging.WARNING]
        assert main(["-v", *command]) == 0
        info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        for stage in ("paging: 1 input(s) into", "limits: 1 input(s)", "encoding:", "decoded 1 inputs in",
                      "summarized 1 input(s)"):
            assert any(message.startswith(stage) for message in info), (stage, info)
        assert not [r for r in caplog.records if r.levelno == logging.DEBUG]
        caplog.clear()
        assert main([*command, "-vv"]) == 0
        debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
        assert any(m.startswith("step 1: ") for m in debug) and any(m.startswith("input 0 unit 1:") for m in debug)
    finally:
        logging.getLogger("locsum_sdk").setLevel(logging.NOTSET)
    capsys.readouterr()


def test_live_follows_a_growing_file_and_encodes_only_new_pages(bundle_dir, tmp_path):
    import random
    import subprocess
    import sys

    from conftest import document

    from locsum_sdk import LiveDocument, Summarizer

    rng = random.Random(4)
    parts = [document(rng, 30) + "\n" for _ in range(3)]
    transcript = tmp_path / "meeting.txt"
    transcript.write_text(parts[0])
    options = ["--max-length", "8", "--num-beams", "1"]
    job = subprocess.Popen([sys.executable, "-m", "locsum_sdk.cli", "live", str(transcript), "--bundle",
                            str(bundle_dir), "--interval", "0.05", "--idle-exit", "3", "--json", *options],
                           stdout=subprocess.PIPE, text=True)
    updates = [json.loads(job.stdout.readline())]
    for part in parts[1:]:
        with open(transcript, "a") as handle:
            handle.write(part)
        updates.append(json.loads(job.stdout.readline()))
    assert job.wait(timeout=60) == 0
    sizes = [update["characters"] for update in updates]
    assert sizes == [len(parts[0]), len(parts[0] + parts[1]), len("".join(parts))]
    assert updates[0]["encoded"] == updates[0]["units"]
    assert all(0 < update["encoded"] < update["units"] for update in updates[1:])  # the new pages and the last
    summarizer = Summarizer.from_pretrained(bundle_dir)
    expected = LiveDocument(summarizer, "".join(parts), max_length=8, num_beams=1).summary()
    assert updates[-1]["summary"] == expected.text
