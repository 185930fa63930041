"""`locsum cache`: the bundles' cache directories listed with their size, last use and the bundle each serves; pruned
when no bundle in use reads them and nothing has for some days; a pruned bundle fills its directory again."""

import os
import shutil
import time
from pathlib import Path

import pytest

from locsum_sdk import bundle_cache
from locsum_sdk.bundle import Bundle
from locsum_sdk.cli import main
from locsum_sdk.errors import OptionError
from locsum_sdk.packed import cache_root

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "engines" / "hiersumm"  # packed, no base model: read from the cache, filled in a second


def age(path: Path, days: float) -> None:
    then = time.time() - days * bundle_cache.DAY
    os.utime(path, (then, then))


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("LOCSUM_BUNDLE", raising=False)
    return tmp_path


def test_a_load_fills_and_marks_its_directory_and_the_listing_names_its_bundle(cache, capsys):
    assert bundle_cache.entries() == [] and main(["cache"]) == 0  # no cache yet
    assert "0 directories, 0 MB" in capsys.readouterr().out
    copy = cache / "mine"
    shutil.copytree(SHIPPED, copy)
    directory = Bundle.load(copy).graph_path
    assert directory == bundle_cache.directory_of(copy) and directory.parent == cache_root()
    age(directory, 30)
    Bundle.load(copy)  # a load is a use
    (entry,) = bundle_cache.entries()
    assert entry.path == directory and entry.unused_days() < 1
    assert entry.size == sum(f.stat().st_size for f in directory.iterdir())
    assert main(["cache", "--keep", str(copy)]) == 0
    line, total = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(directory.name) and line.endswith(str(copy)) and "last used " in line
    assert total.startswith("1 directories, ") and str(cache_root()) in total


def fake_directory(name: str, days: float) -> Path:
    """A cache directory of some other bundle, last read `days` ago."""
    directory = cache_root() / name
    directory.mkdir(parents=True)
    (directory / "base.bin").write_bytes(b"\0" * 1000)
    age(directory, days)
    return directory


def test_prune_removes_only_what_no_bundle_in_use_reads_and_nothing_read_lately(cache, capsys):
    copy = cache / "mine"
    shutil.copytree(SHIPPED, copy)
    mine = Bundle.load(copy).graph_path
    age(mine, 30)
    stale, fresh = fake_directory("a" * 24, 30), fake_directory("b" * 24, 1)
    leftover = fake_directory("c" * 24 + bundle_cache.PRUNING_SUFFIX + ".99", 0)  # an interrupted prune's
    assert {e.path for e in bundle_cache.entries()} == {mine, stale, fresh}

    assert main(["cache", "--prune", "--keep", str(copy), "--dry-run"]) == 0
    assert f"would remove {stale} (0 MB, unused 30 days)" in capsys.readouterr().out
    assert stale.is_dir() and leftover.is_dir()  # a dry run removes nothing
    assert main(["cache", "--prune", "--keep", str(copy), "--unused-days", "0", "--dry-run"]) == 0
    assert f"would remove {fresh} (0 MB, unused 24.0 hours)" in capsys.readouterr().out  # under two days: hours

    assert main(["cache", "--prune", "--keep", str(copy)]) == 0  # unused for 7 days and not kept
    assert f"removed {stale} " in capsys.readouterr().out
    assert not stale.exists() and not leftover.exists() and fresh.is_dir() and mine.is_dir()

    removed = bundle_cache.prune([], unused_days=0)  # nothing kept: every directory goes
    assert {e.path for e in removed} == {mine, fresh} and bundle_cache.entries() == []
    again = Bundle.load(copy)  # filled again on its next load
    assert again.graph_path == mine and all(again.file(name).is_file() for name in again.names())


def test_prune_refuses_a_negative_or_missing_number_of_days(cache, capsys):
    for days in (-1, float("nan"), "7", True):
        with pytest.raises(OptionError, match="give a number of days"):
            bundle_cache.prune([], unused_days=days)
    assert main(["cache", "--prune", "--unused-days", "-2"]) == 2
    assert "days unused -2.0 (--unused-days): give a number of days, 0 or more" in capsys.readouterr().err
