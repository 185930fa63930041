"""The engine bundle on disk: one directory with `manifest.json`, the ONNX graphs and `tokenizer.json`.

The manifest records the format version, the model kind, the unit policy and limits, special token ids,
generation defaults, the graphs' IO names, the dtype and the sha256 of every file. `Bundle.load` refuses a
bundle with a missing or altered file, or one written for another format version or kind.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import constants as C
from .errors import BundleError, BundleIntegrityError, BundleNotFoundError, BundleVersionError

SUPPORTED_KINDS = ("pagesum",)


@dataclass(frozen=True)
class Manifest:
    """The contents of `manifest.json`."""

    kind: str  # one of SUPPORTED_KINDS
    model: dict[str, Any]  # the BartConfig of the model
    units: dict[str, Any]  # PagingOptions defaults; max_pages and page_tokens are the bundle's limits
    special_tokens: dict[str, int]  # bos, pad, eos, decoder_start
    generation: dict[str, Any]  # GenerationOptions defaults
    graphs: dict[str, dict[str, Any]]  # graph name -> {"file", "inputs", "outputs"}
    dtype: str = "float32"
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256
    producer: dict[str, str] = field(default_factory=dict)  # versions of what wrote the bundle
    format_version: int = C.FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: Path) -> "Manifest":
        try:
            values = json.loads(text)
        except json.JSONDecodeError as err:
            raise BundleIntegrityError(f"{where} is not valid JSON ({err}); export the bundle again") from None
        version = values.get("format_version")
        if version != C.FORMAT_VERSION:
            raise BundleVersionError(
                f"{where} has format version {version}, this locsum reads version {C.FORMAT_VERSION}; "
                "export the checkpoint again with this version of locsum"
            )
        if values.get("kind") not in SUPPORTED_KINDS:
            raise BundleVersionError(
                f"{where} is a {values.get('kind')!r} bundle; this locsum runs {SUPPORTED_KINDS}"
            )
        known = {f.name for f in fields(cls)}
        missing = sorted(
            f.name for f in fields(cls) if f.name not in values and f.default is MISSING and f.default_factory is MISSING
        )
        if set(values) - known or missing:
            raise BundleIntegrityError(
                f"{where} has unknown keys {sorted(set(values) - known)} or lacks {missing}; export the bundle again"
            )
        return cls(**values)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Bundle:
    """A validated bundle directory."""

    path: Path
    manifest: Manifest

    @classmethod
    def load(cls, path: str | os.PathLike, verify: bool = True) -> "Bundle":
        """Read and check a bundle. `verify` also checks every file's sha256 against the manifest."""
        path = Path(path)
        if not path.is_dir():
            raise BundleNotFoundError(f"bundle directory {path} does not exist")
        manifest_path = path / C.MANIFEST_FILE
        if not manifest_path.is_file():
            raise BundleNotFoundError(f"{path} has no {C.MANIFEST_FILE}; is it a locsum bundle?")
        manifest = Manifest.from_json(manifest_path.read_text(encoding="utf-8"), manifest_path)
        needed = {graph["file"] for graph in manifest.graphs.values()} | {C.TOKENIZER_FILE}
        unlisted = sorted(needed - set(manifest.files))
        if unlisted:
            raise BundleIntegrityError(f"{manifest_path} lists no checksum for {unlisted}; export the bundle again")
        for name, expected in manifest.files.items():
            file = path / name
            if not file.is_file():
                raise BundleNotFoundError(f"bundle file {file} is missing; copy the whole bundle directory again")
            if verify and sha256(file) != expected:
                raise BundleIntegrityError(
                    f"bundle file {file} does not match its checksum in {C.MANIFEST_FILE}: it was altered or "
                    "damaged; copy or export the bundle again"
                )
        return cls(path, manifest)

    def file(self, name: str) -> Path:
        return self.path / name

    def graph(self, name: str) -> dict[str, Any]:
        if name not in self.manifest.graphs:
            raise BundleError(f"{self.path} has no {name!r} graph; it has {sorted(self.manifest.graphs)}")
        return self.manifest.graphs[name]


def write_manifest(directory: Path, manifest: Manifest) -> Manifest:
    """Checksum every file in `directory` (except the manifest) and write `manifest.json`."""
    files = {p.name: sha256(p) for p in sorted(directory.iterdir()) if p.is_file() and p.name != C.MANIFEST_FILE}
    manifest = Manifest(**{**asdict(manifest), "files": files})
    (directory / C.MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")
    return manifest
