"""ONNX Runtime backend: IO binding with OrtValues reused across steps, explicit thread counts.

Cross keys/values are written by the encoder into one preallocated buffer per layer (micro-batch by micro-batch: on
the CPU each at most about a thousand token rows, `units_per_run`) and bound, unchanged, at every step. On the CPU a
kind whose units are encoded alone has them encoded in runs of like lengths, each padded to its own longest unit
(`base.encode_units`), and each unit's outputs copied into its grid row: a cluster's short documents are not padded
to its longest (Multi-News clusters at the default's defaults, 25% of their units' rows padding: encoding 1.24x as
fast, `benchmarks/test_encoder_runs.py`); other kinds' runs are written straight into the buffers. Each layer's
self-attention cache is one buffer bound as both its past input and its present output, so every step writes its
new position in place; the buffers are replaced only when the cache's capacity grows (every 32 positions).

With `onnxruntime-gpu` installed (`pip install 'locsum[gpu]'`) and `device` "cuda" (or "auto"), the graphs run on
the CUDA execution provider and those buffers live in GPU memory: the cross keys/values and the caches never
leave the device during decoding; per step only the beams' tokens, the position and the slot map go in and the
log-probabilities and unit weights come out. A capacity growth re-lays the caches out through the host (once
every 32 positions).

A bundle whose step reads unit rows (`modeling.fused_unit_rows`) runs on the CPU with `unit_rows.UnitRowsSession`:
its units' keys and values and the summary's in one buffer a layer, no slot cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import constants as C
from .. import kinds
from ..bundle import Bundle
from ..configs.model import step_shape
from ..errors import BackendError, BackendUnavailableError, BundleError, OptionError
from ..memory import available_memory
from ..threads import default_threads
from ..unit_cache import UnitCache
from . import DEVICES, optimized_graphs
from .base import (
    BeamSlots,
    UnitBatch,
    encode_through_cache,
    encode_units,
    fixed_decoder_inputs,
    grown_cache,
    length_axes,
    scatter_top,
    write_unit,
)
from .unit_rows import UnitRowsSession, is_unit_rows

logger = logging.getLogger("locsum_sdk")
CUDA = "CUDAExecutionProvider"
# Token rows an encoder run holds on the CPU at most (unless one unit is longer): past about a thousand rows every
# unit takes longer (benchmarks/test_encoder_runs.py, 2-core EPYC: the default's 512-token pages 196-202 ms each two
# a run, 209-213 four, 238-258 eight; 128-token units 4.3 ms each eight a run, 4.7 four, 7.9 one).
CPU_RUN_ROWS = 1024


def units_per_run(unit_batch_size: int, length: int) -> int:
    """Units an encoder run on the CPU takes: as many as fill `CPU_RUN_ROWS` rows of `length` tokens, at least one
    and at most `unit_batch_size`."""
    return max(1, min(unit_batch_size, CPU_RUN_ROWS // max(length, 1)))


def _import_ort():
    try:
        import onnxruntime
    except ImportError:
        raise BackendUnavailableError(
            "the onnxruntime backend needs onnxruntime: pip install 'locsum[cpu]' (or 'locsum[gpu]' on NVIDIA)"
        ) from None
    return onnxruntime


def _device(ort, device: str, providers: list[str] | None) -> str:
    """Where the buffers live: "cuda" when asked for (or auto) and onnxruntime has the CUDA execution provider."""
    if device not in DEVICES:
        raise OptionError(f"device={device!r} is not one of {list(DEVICES)}")
    has_cuda = CUDA in ort.get_available_providers()
    if device == "cuda" and not has_cuda:
        raise BackendUnavailableError(
            "device='cuda' needs onnxruntime-gpu with a CUDA GPU: pip install 'locsum[gpu]' (it replaces "
            "onnxruntime; uninstall onnxruntime first)"
        )
    if providers is not None:
        return "cuda" if providers[0] == CUDA else "cpu"
    return "cuda" if device in ("cuda", "auto") and has_cuda else "cpu"


def _run(session, binding, graph: str) -> None:
    try:
        session.run_with_iobinding(binding)
    except Exception as err:  # ORT raises bare RuntimeError / its own Fail types
        raise BackendError(
            f"onnxruntime failed running the {graph} ({err}); if memory ran out, load the model with a smaller "
            "unit_batch_size, lower num_beams or max_length, summarize fewer inputs at once, or pass a lower "
            "memory_limit so that inputs over it are refused before they run"
        ) from None


BLOCKS_RUNTIME = (1, 22)  # 8-bit MatMulNBits: a fused step's adapters and LM head (1.21 and older take 4 bits only)
UNIT_ROWS_RUNTIME = (1, 30)  # GroupQueryAttention over an int8 cache as a unit-row step writes it: refused as an
# invalid graph up to 1.24, failing at run in 1.26, writing other or broken summaries in 1.27 to 1.29


def check_runtime(version: str, bundle: Bundle, rows: bool) -> None:
    """BackendUnavailableError where ONNX Runtime `version` is older than the bundle's graphs need: a fused step
    (`blocks`) BLOCKS_RUNTIME, one over unit rows (`rows`) UNIT_ROWS_RUNTIME; the message names the upgrade (and, for
    unit rows, the slot-step export that older ones run)."""
    if rows:
        oldest, what = UNIT_ROWS_RUNTIME, "its step reads unit rows through GroupQueryAttention over an int8 cache"
    elif bundle.manifest.dtype == "blocks":
        oldest, what = BLOCKS_RUNTIME, "its fused step's products are 8-bit MatMulNBits"
    else:
        return
    try:
        found = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        return  # a build that names itself otherwise: let its session say what it takes
    if found < oldest:
        needed = ".".join(map(str, oldest))
        slots = (f", or export the bundle again with the slot step (locsum export --bundle {bundle.path} --quantize "
                 "blocks --unit-rows 0 --output DIR), which needs 1.22" if rows else "")
        raise BackendUnavailableError(f"{bundle.path}: {what}, which onnxruntime {version} does not run as written "
                                      f"(it needs {needed} or newer): pip install -U 'onnxruntime>={needed}'{slots}")


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def __init__(
        self,
        bundle: Bundle,
        threads: int | None = None,
        providers: list[str] | None = None,
        profile_dir: Path | None = None,
        device: str = "auto",
    ):
        """profile_dir: where ONNX Runtime writes a trace of every node run (see `end_profiling`); None: no trace.
        device: "cpu", "cuda" (the CUDA execution provider of onnxruntime-gpu) or "auto" (cuda where available)."""
        ort = _import_ort()
        self.ort, self.bundle = ort, bundle
        self.config = bundle.manifest.model
        # its graphs' IO and how a session binds them, on the model's backbone
        self.kind = kinds.get(bundle.manifest.kind, BundleError).on(self.config)
        self.graphs = self.kind.graphs(self.config)  # each graph's declared IO
        rows = is_unit_rows(self.graphs["decoder"])
        check_runtime(ort.__version__, bundle, rows)
        self.device = _device(ort, device, providers)
        if self.device == "cuda" and rows:
            if device == "cuda":
                raise BackendUnavailableError(
                    f"device='cuda': {bundle.path}'s step reads unit rows, which ONNX Runtime runs on the CPU here; "
                    "pass device='cpu', build TensorRT engines of it (python export/to_trt.py --bundle ...), or "
                    "export it again with the slot step for ONNX Runtime's CUDA provider (locsum export --bundle "
                    f"{bundle.path} --quantize blocks --unit-rows 0 --output DIR)")
            logger.info("%s: its step reads unit rows, which run on the CPU here", bundle.path)
            self.device = "cpu"
        if providers is None and self.device == "cuda":
            providers = [CUDA, "CPUExecutionProvider"]
        self.shape = step_shape(self.config)
        self.layers = self.shape.layers
        self.threads = threads or default_threads()
        self.providers = providers or ["CPUExecutionProvider"]
        self.profile_dir = profile_dir
        # The encoder's threads must not spin once it is done: each session has its own pool, and a spinning
        # encoder pool held the cores through the first decoding step (56 ms instead of 20, bart-base, 2 threads).
        # Its nodes are few and large, so waking its threads costs nothing; the decoder's small nodes keep spinning.
        # Nor does the encoder plan a memory pattern: ONNX Runtime allocates the planned block on the second run
        # with the first run's arena chunks still held, so every input of two or more micro-batches peaked about
        # one encoder run's activations higher (bart-base, 8 pages of 1024 tokens: 2168 MB instead of 1740, no
        # slower without it); the arena alone reuses the chunks.
        # A selection graph (ranker, extractor) runs before the encoder as the encoder does.
        self.sessions = self._sessions()
        if self.device == "cuda" and CUDA not in self.sessions["decoder"].get_providers():
            self._without_cuda(device)
        self.encoder, self.decoder = self.sessions["encoder"], self.sessions["decoder"]
        self.identity = bundle.fingerprint
        self.caches_units = self.device == "cpu"  # on CUDA the grid is device memory the cache does not write

    def _sessions(self) -> dict[str, Any]:
        return {graph: self._session(graph, spin=graph == "decoder", memory_pattern=graph == "decoder")
                for graph in self.graphs}

    def _without_cuda(self, device: str) -> None:
        """onnxruntime lists the CUDA provider whenever onnxruntime-gpu is installed, but a session gets it only where
        the CUDA and cuDNN libraries load: refuse (device="cuda") or go on on the CPU with a warning ("auto")."""
        advice = ("onnxruntime-gpu is installed but its CUDA provider did not load (the CUDA 12 or cuDNN 9 libraries "
                  "are missing or do not match): pip install 'onnxruntime-gpu[cuda,cudnn]' or install CUDA 12 and "
                  "cuDNN 9; `locsum doctor` checks each GPU stage")
        if device == "cuda":
            raise BackendUnavailableError(f"device='cuda': {advice}")
        logger.warning("running on the CPU: %s", advice)
        self.device, self.providers = "cpu", ["CPUExecutionProvider"]
        self.sessions = self._sessions()

    def _options(self, spin: bool, memory_pattern: bool):
        ort = self.ort
        options = ort.SessionOptions()
        options.enable_mem_pattern = memory_pattern
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        return options

    def _session(self, graph: str, spin: bool, memory_pattern: bool):
        spec = self.bundle.graph(graph)
        options = self._options(spin, memory_pattern)
        if self.profile_dir is not None:
            options.enable_profiling = True
            options.profile_file_prefix = str(Path(self.profile_dir) / graph)
        try:
            session = optimized_graphs.session(self.ort, self.bundle, graph, options, self.providers)
        except OptionError:  # $LOCSUM_KEEP_GRAPHS set to what it does not take
            raise
        except Exception as err:  # ORT raises its own exception types for unreadable graphs
            raise BundleError(f"onnxruntime cannot load {spec['file']} of {self.bundle.path}: {err}") from None
        io = self.graphs[graph]
        found = [(t.name, t.type) for t in session.get_inputs()], [(t.name, t.type) for t in session.get_outputs()]
        declared = [(t.name, t.onnx_type) for t in io.inputs], [(t.name, t.onnx_type) for t in io.outputs]
        if found[0] != declared[0] or not io.accepts_outputs(found[1]):
            raise BundleError(
                f"{spec['file']} has inputs/outputs {found}, but a {self.bundle.manifest.kind} {graph} takes and "
                f"returns {declared}; export the bundle again"
            )
        return session

    def start(self, batch: UnitBatch, beams: int, unit_batch_size: int,
              cache: UnitCache | None = None) -> OnnxRuntimeSession | UnitRowsSession:
        if is_unit_rows(self.graphs["decoder"]):
            steps = self.bundle.manifest.options().generation.max_length
            return UnitRowsSession(self, batch, beams, lambda tokens: units_per_run(unit_batch_size, tokens),
                                   C.CACHE_CHUNK * -(-steps // C.CACHE_CHUNK), cache)
        return OnnxRuntimeSession(self, batch, beams, unit_batch_size, cache)

    def encoded(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One encoder run's cross outputs by name, host arrays (for units written into a grid one by one)."""
        names = [t.name for t in self.graphs["encoder"].outputs if t.name != C.ENCODER_HIDDEN]
        try:
            values = self.encoder.run(names, {k: np.ascontiguousarray(v) for k, v in inputs.items()})
        except Exception as err:  # ORT raises bare RuntimeError / its own Fail types
            raise BackendError(f"onnxruntime failed running the encoder ({err})") from None
        return dict(zip(names, values))

    def run_decoder(self, binding) -> None:
        _run(self.decoder, binding, "decoder")

    def free_memory(self) -> int | None:
        """On CUDA the GPU's free memory (read through cuda-python; where it is missing, this machine's available
        memory, as on the CPU)."""
        if self.device == "cuda":
            from . import cuda

            try:
                return int(cuda.check(cuda.runtime().cudaMemGetInfo(), "cudaMemGetInfo")[0])
            except BackendUnavailableError:
                pass
        return available_memory()

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one of the kind's graphs (e.g. a selection stage's) on `inputs` by name; its outputs by name."""
        if graph not in self.sessions:
            raise BackendError(f"a {self.kind.name} bundle has no {graph!r} graph; it has {sorted(self.sessions)}")
        names = self.graphs[graph].output_names  # the declared ones (a graph exported before may write more)
        try:
            values = self.sessions[graph].run(names, {name: np.ascontiguousarray(value)
                                                      for name, value in inputs.items()})
        except Exception as err:  # ORT raises bare RuntimeError / its own Fail types
            raise BackendError(f"onnxruntime failed running the {graph} ({err})") from None
        return dict(zip(names, values))

    def end_profiling(self) -> dict[str, Path]:
        """Stop tracing (backend made with `profile_dir`) and return each graph's trace file (Chrome trace JSON)."""
        if self.profile_dir is None:
            raise BackendError("this backend was made without profile_dir, so it has no trace to end")
        return {graph: Path(session.end_profiling()) for graph, session in self.sessions.items()}


class OnnxRuntimeSession:
    def __init__(self, backend: OnnxRuntimeBackend, batch: UnitBatch, beams: int, unit_batch_size: int,
                 cache: UnitCache | None = None):
        ort, cfg = backend.ort, backend.config
        self.backend, self.batch, self.beams, self.layout = backend, batch, beams, backend.kind.layout
        self.rows = batch.batch * batch.width  # N, grid rows
        heads, dim = backend.shape.cache_heads, backend.shape.head_dim
        length = batch.input_ids.shape[1]
        self.device = backend.device
        self.cross = {}
        for i in range(backend.layers):
            self.cross[C.cross_key(i)] = self._buffer((self.rows, heads, dim, length))
            self.cross[C.cross_value(i)] = self._buffer((self.rows, heads, length, dim))
        size_of = ((lambda tokens: units_per_run(unit_batch_size, tokens)) if self.device == "cpu"
                   else (lambda tokens: unit_batch_size))  # units an encoder run of units of `tokens` takes
        if cache is not None and self.layout.units_alone and backend.caches_units:
            self._encode_cached(size_of, cache)
        elif self.device == "cpu" and self.layout.units_alone:
            axes = length_axes(backend.graphs["encoder"])
            encode_units(batch, self.layout, range(len(batch.input_ids)), size_of, axes, self.backend.encoded,
                         lambda row, name, array: write_unit(self.cross[name], row, axes[name], array))
        else:
            self._encode(size_of(length))
        to_ort = ort.OrtValue.ortvalue_from_numpy
        self.tokens = np.zeros((batch.batch, beams), dtype=np.int64)  # rewritten in place every step
        self.position = np.zeros(1, dtype=np.int64)
        self.slots = BeamSlots(batch.batch, beams)
        log_probs_shape = (batch.batch, beams, cfg["vocab_size"])
        self.log_probs = np.zeros(log_probs_shape, dtype=np.float32)
        self.unit_weights = np.zeros((batch.batch, batch.width, beams), dtype=np.float32)
        top = {o.name: o.shape[2] for o in backend.decoder.get_outputs() if o.name == C.TOP_TOKENS}
        self.partial_log_probs = bool(top)  # a prepared graph: only each beam's best tokens come to the host
        self.fixed = {
            C.INPUT_IDS: to_ort(self.tokens),
            C.POSITION: to_ort(self.position),
            **{name: to_ort(np.ascontiguousarray(value))
               for name, value in fixed_decoder_inputs(self.layout, batch, backend.graphs["decoder"]).items()},
            **{name: self._value(buffer) for name, buffer in self.cross.items()},
        }
        self.cache = {}  # (past, present) name -> (G, H, K, C, d), G rows as the kind lays them out
        for i, groups in enumerate(self.layout.cache_groups(batch.batch, batch.width, backend.shape)):
            for past, present in ((C.past_key(i), C.present_key(i)), (C.past_value(i), C.present_value(i))):
                self.cache[past, present] = self._buffer((groups, heads, beams, self.slots.capacity, dim))
        self.binding = backend.decoder.io_binding()
        self._bind_cache()
        for name, value in self.fixed.items():
            self.binding.bind_ortvalue_input(name, value)
        host = [(C.UNIT_WEIGHTS, self.unit_weights)]
        if self.partial_log_probs:
            count = top[C.TOP_TOKENS]
            self.top_log_probs = np.zeros((*log_probs_shape[:2], count), dtype=np.float32)
            self.top_tokens = np.zeros((*log_probs_shape[:2], count), dtype=np.int32)
            self.device_log_probs = self._buffer(log_probs_shape)  # stays where the graph runs until asked for
            self.binding.bind_output(C.LOG_PROBS, self.device, 0, np.float32, list(log_probs_shape),
                                     self._pointer(self.device_log_probs))
            host += [(C.TOP_LOG_PROBS, self.top_log_probs), (C.TOP_TOKENS, self.top_tokens)]
        else:
            host.append((C.LOG_PROBS, self.log_probs))
        for name, buffer in host:
            self.binding.bind_output(name, "cpu", 0, buffer.dtype.type, list(buffer.shape), buffer.ctypes.data)

    def _buffer(self, shape: tuple[int, ...], values: np.ndarray | None = None):
        """A zero float32 buffer (or `values`) where the graphs run: a numpy array, or a CUDA OrtValue."""
        if self.device == "cpu":
            return np.zeros(shape, np.float32) if values is None else values
        host = np.zeros(shape, np.float32) if values is None else values
        return self.backend.ort.OrtValue.ortvalue_from_numpy(host, "cuda", 0)

    def _value(self, buffer):
        return buffer if self.device == "cuda" else self.backend.ort.OrtValue.ortvalue_from_numpy(buffer)

    def _pointer(self, buffer) -> int:
        return buffer.data_ptr() if self.device == "cuda" else buffer.ctypes.data

    def _encode(self, unit_batch_size: int) -> None:
        """Run the encoder micro-batch by micro-batch, writing cross K/V straight into the grid buffers."""
        encoder, batch = self.backend.encoder, self.batch
        ort = self.backend.ort
        for first, end, row in self.layout.encoder_runs(batch, unit_batch_size):
            binding = encoder.io_binding()
            for name, value in self.layout.encoder_inputs(batch, first, end).items():
                binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value)))
            for name, buffer in self.cross.items():
                shape = [end - first, *buffer.shape()[1:]] if self.device == "cuda" else [end - first,
                                                                                          *buffer.shape[1:]]
                offset = row * int(np.prod(shape[1:])) * 4  # float32 rows of the grid
                binding.bind_output(name, self.device, 0, np.float32, shape, self._pointer(buffer) + offset)
            _run(encoder, binding, "encoder")

    def _encode_cached(self, size_of: Callable[[int], int], cache: UnitCache) -> None:
        """Units found in `cache` are copied into the grid; the others are encoded, copied there and stored."""
        axes = length_axes(self.backend.graphs["encoder"])
        encode_through_cache(self.batch, self.layout, size_of, cache, self.backend.identity, axes, self.backend.encoded,
                             lambda row, name, array: write_unit(self.cross[name], row, axes[name], array))

    def _bind_cache(self) -> None:
        """Bind each cache buffer as its layer's past and present (written in place), and the slot map."""
        to_ort = self.backend.ort.OrtValue.ortvalue_from_numpy
        for (past, present), buffer in self.cache.items():
            value = self._value(buffer)
            self.binding.bind_ortvalue_input(past, value)
            self.binding.bind_ortvalue_output(present, value)
        self.binding.bind_ortvalue_input(C.CACHE_SLOTS, to_ort(self.slots.slots))  # rewritten in place every step

    def _grow_cache(self) -> None:
        zeros = lambda shape: np.zeros(shape, np.float32)  # noqa: E731
        for key, buffer in self.cache.items():
            host = buffer.numpy() if self.device == "cuda" else buffer
            grown = grown_cache(host, self.slots.capacity, zeros)
            self.cache[key] = self._buffer(grown.shape, grown)
        self._bind_cache()

    def step(self, tokens: np.ndarray, beam_index: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        self.tokens[...] = tokens
        if self.slots.advance(beam_index):
            self._grow_cache()
        self.position[0] = self.slots.position
        _run(self.backend.decoder, self.binding, "decoder")
        if self.partial_log_probs:
            return scatter_top(self.top_log_probs, self.top_tokens, self.log_probs), self.unit_weights
        return self.log_probs, self.unit_weights

    def full_log_probs(self) -> np.ndarray:
        if self.partial_log_probs:
            buffer = self.device_log_probs
            return buffer.numpy() if self.device == "cuda" else buffer
        return self.log_probs

    def close(self) -> None:
        self.cache.clear()
        self.fixed.clear()
        self.cross.clear()
