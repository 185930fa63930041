"""train.base_parts: a file cut into parts travels a few parts per call and is written whole, verified, once every
part has arrived; a damaged part is refused."""

import os

import pytest

from locsum_sdk.errors import DataError
from train.base_parts import join, main, split


def test_parts_carried_over_several_calls_make_the_file(tmp_path):
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom(1_000_003))
    index = split(source, tmp_path / "parts", 300_000)
    assert [p["bytes"] for p in index["parts"]] == [300_000, 300_000, 300_000, 100_003]
    there = tmp_path / "there"
    for call, names in enumerate((["part-000", "part-002"], ["part-001"], ["part-003"])):
        carried = tmp_path / f"call-{call}"  # what one call brings: index.json and some parts
        carried.mkdir()
        for name in ["index.json", *names]:
            (carried / name).write_bytes((tmp_path / "parts" / name).read_bytes())
        target, missing = join(carried, there)
        if call < 2:
            assert target is None and missing == ["part-001", "part-003"][call:]
    assert target == there / "model.gguf" and target.read_bytes() == source.read_bytes()
    assert join(tmp_path / "parts", there) == (target, [])  # again: nothing to do


def test_a_damaged_part_or_a_missing_index_is_refused(tmp_path, capsys):
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom(10_000))
    split(source, tmp_path / "parts", 4_000)
    damaged = bytearray((tmp_path / "parts" / "part-001").read_bytes())
    damaged[0] ^= 1
    (tmp_path / "parts" / "part-001").write_bytes(bytes(damaged))
    with pytest.raises(DataError, match="part-001 does not match its sha256"):
        join(tmp_path / "parts", tmp_path / "there")
    with pytest.raises(DataError, match="index.json is missing"):
        join(tmp_path, tmp_path / "there")
    assert main(["split", "--file", str(source), "--size", "5kB", "--into", str(tmp_path / "cli")]) == 0
    assert main(["join", "--parts", str(tmp_path / "cli"), "--into", str(tmp_path / "cli-there")]) == 0
    assert "complete" in capsys.readouterr().out
    assert (tmp_path / "cli-there" / "model.gguf").read_bytes() == source.read_bytes()
