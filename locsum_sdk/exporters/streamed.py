"""An LLM's graphs exported without the model in memory: traced on stand-in weights that hold no memory
(`llm_checkpoint.stand_in`), each graph written without weights (`graphs.export_structure`), then every weight read
from the user's file one tensor at a time, written to base.bin as it comes and pointed to by the graphs, with its
recipe (`base_weights.BaseTensor`), as `base_derived` records a matched weight.

What the export holds at once: the exporting process itself, one tensor of the file dequantized to float32 (with
its transposed copy where a graph reads it transposed: the tied LM head) and the graphs without their weights. The
check against torch, when on, needs what running the model needs, one after the other: the model in torch (its
float32 weights, once), then the graphs in ONNX Runtime (base.bin, once).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base_weights import ALIGNMENT, BASE_FILE, BaseRecord, BaseTensor, wanted_arrays
from ..errors import BundleVersionError, ExportError
from ..llm.source import Origin
from ..model_files import UserFile
from .base_derived import MIN_BYTES, point_to_base

if TYPE_CHECKING:
    from torch import nn

logger = logging.getLogger("locsum_sdk")


@dataclass(frozen=True)
class ExportMemory:
    """The most an LLM's float32 export onto its own files (`export_graphs`) holds at once above the exporting
    process once it has read the model's header (Python, torch, ONNX and the exporter imported: about 0.4 GB), from
    the model's shapes alone (bytes). `benchmarks/test_export_memory.py` measures it."""

    largest: int  # the largest weight, in float32
    weights: int  # every weight, in float32: what running the model needs

    WORK = 256 * 2**20  # apart from any weight: the torch exporter's passes, the graphs, the allocator's own movement

    @classmethod
    def of(cls, origins: Iterable[Origin]) -> ExportMemory:
        """The bound for the weights at `origins` (`llm.source.LLMSource.origins`'s values)."""
        sizes = [4 * math.prod(origin.shape) for origin in origins]
        return cls(max(sizes, default=0), sum(sizes))

    @property
    def writing(self) -> int:
        """Tracing, then writing base.bin: one weight dequantized, its transposed copy and the dequantizing's own
        arrays."""
        return self.WORK + 3 * self.largest

    @property
    def validating(self) -> int:
        """With the check against torch: the model in torch, then the graphs in ONNX Runtime (every weight, a tied
        LM head twice, and what it packs for its kernels), one after the other, after writing."""
        return self.WORK + max(3 * self.largest, self.weights * 3 // 2 + self.largest)


@dataclass(frozen=True)
class Wanted:
    """A graph's initializer read from the user's files: a tensor of one file, as stored or transposed."""

    file: Path
    name: str
    transpose: bool


def _transposed(node: Any) -> bool:
    from onnx import helper

    perm = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "perm"), None)
    return node.op_type == "Transpose" and list(perm or ()) == [1, 0]


def weigh_graph(path: Path, module: nn.Module, inputs: list[str], origins: dict[int, Origin]) -> dict[str, Wanted]:
    """Make the weight inputs of the weightless graph at `path` (the tensors of the state of `module`, which traced
    it: `graphs.export_structure`) its initializers: the kind's own weights written in, the file's (`origins`, by
    the id of the module's tensor) left to fill, each Transpose of one read as the file's tensor transposed (what
    folding its constant would make). Returns the initializers to fill, by name."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    tensors = module.state_dict(keep_vars=True)
    fill: dict[str, Wanted] = {}
    weights = [value for value in graph.input if value.name not in inputs]
    for value in weights:
        tensor = tensors.get(value.name)
        if tensor is None:
            raise ExportError(f"{path.name}: input {value.name!r} is neither one of the graph's nor a weight")
        origin = origins.get(id(tensor))
        if origin is None:
            graph.initializer.append(numpy_helper.from_array(tensor.detach().numpy(), value.name))
        else:
            fill[value.name] = Wanted(origin.file, origin.name, False)
        graph.input.remove(value)
    for node in list(graph.node):
        if _transposed(node) and node.input[0] in fill:
            fill[node.output[0]] = Wanted(fill[node.input[0]].file, fill[node.input[0]].name, True)
            graph.node.remove(node)
    used = {name for node in graph.node for name in node.input} | {value.name for value in graph.output}
    fill = {name: wanted for name, wanted in fill.items() if name in used}
    onnx.save(model, str(path))
    return fill


def write_weights(directory: Path, wanted: set[Wanted], shapes: dict[tuple[Path, str], tuple[int, ...]],
                  ) -> tuple[BaseRecord, dict[Wanted, BaseTensor], dict[Wanted, np.ndarray]]:
    """Read every wanted tensor from its file, one at a time, and write base.bin in `directory` as it goes (each
    tensor page-aligned, hashed as written). Returns the record of base.bin, where each large tensor lies, and the
    small ones (under `base_derived.MIN_BYTES`: norms, biases), which stay inside the graphs."""
    files = sorted({w.file for w in wanted}, key=str)
    logger.info("writing %s from %d tensors of %s, one at a time", BASE_FILE, len({(w.file, w.name) for w in wanted}),
                ", ".join(f.name for f in files))
    placed: dict[Wanted, BaseTensor] = {}
    small: dict[Wanted, np.ndarray] = {}
    digest = hashlib.sha256()
    with open(directory / BASE_FILE, "wb") as out:
        for index, file in enumerate(files):
            names = {w.name for w in wanted if w.file == file}
            for name, array in wanted_arrays(file, names, file.name):
                if array.shape != shapes[file, name]:
                    raise BundleVersionError(f"{name} of {file} has shape {array.shape}, not the {shapes[file, name]} "
                                             "its header gave: the file changed during the export")
                for transpose in (False, True):
                    if Wanted(file, name, transpose) not in wanted:
                        continue
                    recipe = BaseTensor(index, name, 0, 0, transpose=transpose)
                    values = recipe.values(array)
                    if values.nbytes < MIN_BYTES:
                        small[Wanted(file, name, transpose)] = values
                        continue
                    padding = b"\0" * (-out.tell() % ALIGNMENT)
                    out.write(padding)
                    digest.update(padding)
                    placed[Wanted(file, name, transpose)] = replace(recipe, offset=out.tell(), length=values.nbytes)
                    out.write(values.data)
                    digest.update(values.data)
                    del values
                del array
        size = out.tell()
    tensors = sorted(placed.values(), key=lambda t: t.offset)
    logger.info("%d tensors (%.1f MB) of %s are assembled from the file on the user's machine", len(tensors),
                size / 1e6, ", ".join(f.name for f in files))
    return BaseRecord([UserFile(f).record(f) for f in files], size, digest.hexdigest(), tensors), placed, small


def fill_graph(path: Path, fill: dict[str, Wanted], placed: dict[Wanted, BaseTensor],
               small: dict[Wanted, np.ndarray], shapes: dict[tuple[Path, str], tuple[int, ...]]) -> None:
    """Give the graph at `path` its initializers from the user's file: large ones read from base.bin, small ones
    written in."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    for name, wanted in fill.items():
        if wanted in small:
            model.graph.initializer.append(numpy_helper.from_array(small[wanted], name))
            continue
        shape = shapes[wanted.file, wanted.name]
        init = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT,
                                dims=shape[::-1] if wanted.transpose else shape)
        point_to_base(init, placed[wanted])
        model.graph.initializer.append(init)
    onnx.save(model, str(path))


def export_graphs(work: Path, model: nn.Module, origins: dict[str, Origin], specs: dict[str, Any],
                  files: dict[str, str], opset: int, check: Callable[[Path, str], None],
                  reference: Callable[[], dict[str, Any]] | None,
                  compare: Callable[[Path, Any, list[np.ndarray]], float]) -> tuple[dict[str, Any], BaseRecord]:
    """Write the graphs `specs` (name -> `graphs.GraphSpec` of `model`, on stand-ins) as `files` (name -> file name)
    in `work`, with base.bin; `check(path, name)` checks each written graph. With a `reference` (the graphs' specs
    on the model with its real weights), each graph is compared with torch (`compare(path, spec, torch outputs)`
    returns the largest difference). Returns the manifest's graphs and base.bin's record."""
    from ..modeling import graphs

    memory = ExportMemory.of(origins.values())
    checked = f" ({memory.validating / 1e9:.2f} GB as each graph runs against torch)" if reference else ""
    logger.info("the export holds at most %.2f GB above what it held before%s", memory.writing / 1e9, checked)
    by_id = {id(tensor): origins[name] for name, tensor in model.state_dict(keep_vars=True).items()
             if name in origins}
    shapes = {(origin.file, origin.name): origin.shape for origin in origins.values()}
    fills: dict[str, dict[str, Wanted]] = {}
    written: dict[str, dict[str, Any]] = {}
    for name, spec in specs.items():
        path = work / files[name]
        logger.info("exporting %s", path.name)
        graphs.export_structure(spec, path, opset)
        fills[name] = weigh_graph(path, spec.module, spec.inputs, by_id)
        written[name] = {"file": path.name, "inputs": spec.inputs, "outputs": spec.outputs}
    record, placed, small = write_weights(work, {w for fill in fills.values() for w in fill.values()}, shapes)
    for name, fill in fills.items():
        fill_graph(work / files[name], fill, placed, small, shapes)
        check(work / files[name], name)
    if reference is not None:
        for name, (spec, expected) in _reference_outputs(reference).items():
            worst = written[name]["max_abs_diff"] = compare(work / files[name], spec, expected)
            logger.info("%s matches torch within %.1e", files[name], worst)
    return written, record


def _reference_outputs(reference: Callable[[], dict[str, Any]]) -> dict[str, tuple[Any, list[np.ndarray]]]:
    """Each graph's spec, without its module, and the torch outputs on its example inputs, of the model with its
    real weights; the model is let go before any graph runs on ONNX Runtime."""
    from dataclasses import replace

    from ..modeling import graphs

    specs = reference()
    found = {name: (replace(spec, module=None), graphs.outputs(spec)) for name, spec in specs.items()}
    del specs
    gc.collect()
    return found
