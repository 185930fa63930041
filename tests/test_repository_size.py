"""The repository's files stay under 60 MB: a GPU machine receives the working tree (tracked files and untracked
ones git does not ignore) within 64 MiB, so a checkout past the bound cannot be run there."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60_000_000  # bytes


def test_the_working_tree_stays_under_60_mb():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an installed copy): nothing travels from here")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    sizes = {name.decode(): (ROOT / name.decode()).stat().st_size for name in listed
             if name and (ROOT / name.decode()).is_file()}
    total = sum(sizes.values())
    largest = ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in sorted(sizes.items(), key=lambda x: -x[1])[:5])
    assert total < LIMIT, f"the working tree holds {total / 1e6:.1f} MB (at most {LIMIT / 1e6:.0f}); largest: {largest}"
