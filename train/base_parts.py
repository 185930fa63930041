"""Carry the base model's GGUF to a machine that cannot download it, in parts that fit beside the working tree.

A GPU machine lent here receives the working tree and what `carry` names, 64 MiB in all, and the tracked files take
most of that: the 98 MB file travels a part per call. Here, once:

    python -m train.base_parts split --size 9MB --into benchmarks/gpu/base      # parts and index.json

There, in each call that carries a part (with index.json), while the machine stays warm:

    python -m train.base_parts join --parts benchmarks/gpu/base --into ~/.cache/locsum/base

`join` keeps the parts earlier calls brought (each checked against its sha256), says which are still missing, and
writes the file when all are there, checked whole; `locsum_sdk.base_model.read_base(PATH)` reads it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from locsum_sdk.base_model import BASE_FILE, base_file
from locsum_sdk.base_weights import file_sha256
from locsum_sdk.errors import DataError, OptionError
from locsum_sdk.memory import parse_size

INDEX = "index.json"


def split(source: Path, into: Path, size: int) -> dict:
    """`source` cut into parts of at most `size` bytes in `into`, with index.json (name, size and sha256 of the
    whole file and of every part)."""
    if size < 1:
        raise OptionError(f"size={size} must be at least one byte")
    into.mkdir(parents=True, exist_ok=True)
    parts = []
    with open(source, "rb") as handle:
        for number, block in enumerate(iter(lambda: handle.read(size), b"")):
            name = f"part-{number:03d}"
            (into / name).write_bytes(block)
            parts.append({"name": name, "bytes": len(block), "sha256": hashlib.sha256(block).hexdigest()})
    index = {"file": source.name, "bytes": source.stat().st_size, "sha256": file_sha256(source), "parts": parts}
    (into / INDEX).write_text(json.dumps(index, indent=1))
    return index


def join(parts: Path, into: Path) -> tuple[Path | None, list[str]]:
    """Keep the parts found in `parts` in `into` (each verified), and write the whole file there once every part is
    kept -> (the file or None, the names still missing)."""
    index_file = parts / INDEX
    if not index_file.is_file():
        raise DataError(f"{index_file} is missing: carry index.json with every part")
    index = json.loads(index_file.read_text())
    into.mkdir(parents=True, exist_ok=True)
    elsewhere = parts.resolve() != into.resolve()
    if elsewhere:
        shutil.copyfile(index_file, into / INDEX)
    missing = []
    for part in index["parts"]:
        carried, kept = parts / part["name"], into / part["name"]
        if carried.is_file():
            if file_sha256(carried) != part["sha256"]:
                raise DataError(f"{carried} does not match its sha256 in index.json: carry it again")
            if elsewhere:
                shutil.copyfile(carried, kept)
        if not (kept.is_file() and file_sha256(kept) == part["sha256"]):
            missing.append(part["name"])
    target = into / index["file"]
    if missing:
        return None, missing
    if not (target.is_file() and file_sha256(target) == index["sha256"]):
        with tempfile.NamedTemporaryFile(dir=into, delete=False, suffix=".part") as handle:
            for part in index["parts"]:
                handle.write((into / part["name"]).read_bytes())
        if file_sha256(Path(handle.name)) != index["sha256"]:
            os.unlink(handle.name)
            raise DataError(f"the joined parts do not match the sha256 of {index['file']} in index.json")
        os.replace(handle.name, target)
    return target, []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    cut = commands.add_parser("split", help="cut the installed base model (or --file) into parts", allow_abbrev=False)
    cut.add_argument("--file", type=Path, help=f"the GGUF (default: the installed wheel's {BASE_FILE})")
    cut.add_argument("--size", default="9MB", help="the largest part, e.g. 9MB (1 MB = 10**6 bytes)")
    cut.add_argument("--into", type=Path, required=True)
    put = commands.add_parser("join", help="keep the parts carried so far; write the file when all are there",
                              allow_abbrev=False)
    put.add_argument("--parts", type=Path, required=True)
    put.add_argument("--into", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "split":
        index = split(args.file or base_file(), args.into, parse_size(args.size, "size"))
        print(f"{index['file']}: {len(index['parts'])} parts in {args.into}")
        return 0
    target, missing = join(args.parts, args.into.expanduser())
    print(f"complete: {target}" if target else f"still missing: {' '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
