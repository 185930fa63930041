"""ONNX Runtime's graph optimizations, done once per bundle, graph and machine.

Building a session runs ONNX Runtime's optimizers over the whole graph (fusions, constant folding): for the
default bundle's two graphs about 6 of the 8 seconds a load took on 2 cores, at every load. A bundle read from the
user's cache (`packed.cached_directory`: the shipped bundles, every bundle on a pretrained file) keeps the optimized
graphs ONNX Runtime wrote at its first load beside its files there (`graphs/<key>/`), and later loads read them with
the optimizers off: the same nodes, so the same kernels and results. The key names the graph, its form, the ONNX
Runtime version and this processor (its model and instruction sets: an optimized graph may hold kernels chosen for
them); a directory is written whole under another name and then renamed, so concurrent loads never read half of one,
and one that no longer matches its bundle's files or does not load is written again. The graphs are pruned with
their bundle's directory (`bundle_cache`), and a graph's directories under other keys (another ONNX Runtime,
processor or form) that no load has read for UNUSED_DAYS are removed at a load of its current one. On CUDA, for a
bundle read from where it lies, or with `$LOCSUM_KEEP_GRAPHS` set to 0 (a read-only or shared cache, a look at what
ONNX Runtime's optimizers do at each load), sessions are built as before: optimized at every load, nothing kept or
read.

The kept weights file also holds the weights as ONNX Runtime's kernels pre-pack them (`PREPACKED`): a later load maps
them from the file instead of packing every weight again into its own memory, so processes on one machine (corpus
workers, service replicas) share them through the page cache, at the cost of about twice the kept files' size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ..bundle import Bundle
from ..errors import OptionError
from ..threads import cpu_fields

logger = logging.getLogger("locsum_sdk")
GRAPHS_DIR = "graphs"  # under a bundle's cache directory
STAMP_FILE = "stamp.json"  # the bundle files' sizes and times the graphs were optimized from; written last
KEEP_ENV = "LOCSUM_KEEP_GRAPHS"
PREPACKED = True  # keep the weights as the kernels pre-pack them beside the graph (see the module docstring)
UNUSED_DAYS = 7.0  # a graph's directory under another key that no load read for this long goes at the next load


def processor() -> str:
    """This processor's model and instruction sets (`threads.cpu_fields`), or what `platform` knows."""
    fields = cpu_fields()
    if not fields:
        return f"{platform.machine()} {platform.processor()}"
    return f"{platform.machine()} {fields.get('model name', '')} {fields.get('flags', '')}"


def directory(ort: Any, bundle: Bundle, graph: str) -> Path | None:
    """Where `graph`'s optimized form is kept for `bundle` on this machine; None where the bundle is read from where
    it lies (its graphs are not copied into the cache, nor are their optimized forms) or none are kept (`keeping`)."""
    if bundle.graph_path is None or not keeping():
        return None
    form = "prepacked" if PREPACKED else "plain"
    key = hashlib.sha256("\n".join((graph, form, ort.__version__, processor())).encode()).hexdigest()[:16]
    return bundle.graph_path / GRAPHS_DIR / f"{graph}-{key}"


def keeping() -> bool:
    """Whether optimized graphs are kept and read: `$LOCSUM_KEEP_GRAPHS` (read at each load) 1 or unset, not 0."""
    value = os.environ.get(KEEP_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise OptionError(f"{KEEP_ENV}={value!r} is not accepted; set it to 0 (ONNX Runtime optimizes the graphs at "
                          "every load, nothing kept) or 1 (kept in the bundle's cache directory, the default), or "
                          "unset it")
    return value != "0"


def stamp(bundle: Bundle) -> list[list]:
    """The sizes and modification times of the files the graphs are read from: a file written again (a cache
    directory filled again) makes the optimized graphs stale."""
    found = []
    for name in bundle.names():
        status = bundle.file(name).stat()
        found.append([name, status.st_size, status.st_mtime_ns])
    return found


def session(ort: Any, bundle: Bundle, graph: str, options: Any, providers: list[str]) -> Any:
    """An ONNX Runtime session of the bundle's `graph` with `options` (ORT_ENABLE_ALL): from its optimized form kept
    in the cache, or, where there is none yet, one that writes it there as it is built (see the module docstring)."""
    source = str(bundle.file(bundle.graph(graph)["file"]))
    kept = directory(ort, bundle, graph) if providers == ["CPUExecutionProvider"] else None
    if kept is None:
        return ort.InferenceSession(source, options, providers=providers)
    current = stamp(bundle)
    model = kept / f"{graph}.onnx"
    if _matches(kept, current):
        level = options.graph_optimization_level
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            built = ort.InferenceSession(str(model), options, providers=providers)
        except Exception as err:  # ORT raises its own types for a graph it cannot read: optimize it again
            logger.warning("the optimized %s in %s did not load (%s); optimizing it again", graph, kept, err)
            shutil.rmtree(kept, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):  # its last use (a cache filled read-only stays so)
                os.utime(kept / STAMP_FILE)
            _prune_others(kept, graph)
            return built
        options.graph_optimization_level = level
    return _written(ort, source, kept, graph, options, providers, current)


def _matches(kept: Path, current: list[list]) -> bool:
    try:
        return json.loads((kept / STAMP_FILE).read_text(encoding="utf-8")) == current
    except (OSError, ValueError):
        return False


def _prune_others(kept: Path, graph: str) -> None:
    """Remove `graph`'s directories under other keys than `kept`'s that no load has read for UNUSED_DAYS (each
    renamed first, so that a load reading it meanwhile writes its own again instead of reading half of one)."""
    now = time.time()
    for other in kept.parent.glob(f"{graph}-*"):
        try:
            unused = now - (other / STAMP_FILE).stat().st_mtime
        except OSError:  # no stamp: half written by a load that stopped, or being removed
            continue
        if other != kept and unused > UNUSED_DAYS * 86_400:
            doomed = other.with_name(f".{other.name}.pruning")
            with contextlib.suppress(OSError):
                os.replace(other, doomed)
                shutil.rmtree(doomed, ignore_errors=True)


def _written(ort: Any, source: str, kept: Path, graph: str, options: Any, providers: list[str],
             current: list[list]) -> Any:
    """The session built from `source`, writing its optimized graph (weights beside it) into a new directory that
    then takes `kept`'s place; where the cache cannot be written, the session alone."""
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(dir=kept.parent, prefix=f".{graph}-"))
    except OSError:
        return ort.InferenceSession(source, options, providers=providers)
    try:
        options.optimized_model_filepath = str(partial / f"{graph}.onnx")
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{graph}.bin")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        options.add_session_config_entry("session.save_external_prepacked_constant_initializers", str(int(PREPACKED)))
        try:
            built = ort.InferenceSession(source, options, providers=providers)
        except Exception:  # ORT's own types: a graph it cannot read, or a file it could not write
            options.optimized_model_filepath = ""
            return ort.InferenceSession(source, options, providers=providers)
        try:
            (partial / STAMP_FILE).write_text(json.dumps(current), encoding="utf-8")
            if not _matches(kept, current):  # none there, or a stale one; another load may have written it
                shutil.rmtree(kept, ignore_errors=True)
                os.replace(partial, kept)
                _prune_others(kept, graph)
        except OSError as err:  # the disk full, or another load renamed its own there first
            logger.debug("the optimized %s was not kept in %s (%s)", graph, kept, err)
        return built
    finally:
        shutil.rmtree(partial, ignore_errors=True)
