"""TensorRT backend: the bundle's plans (built by `locsum export --trt`) run on one CUDA stream.

- Each plan is deserialized once, with one execution context; every input and output has a device buffer sized
  for its profile's maximum, allocated when the backend loads and reused by every call.
- The encoder runs micro-batch by micro-batch (`unit_batch_size` units in parallel per run), writing each run's
  cross keys and values straight into the grid buffers at the run's first row; they stay on the device for the
  whole decoding.
- Each layer's self-attention cache lives on the device in two buffers: a step reads one as its past and writes
  the other as its present, then they swap. Beams never copy it: a step's `cache_slots` (small integers, uploaded
  with the tokens) says which slot holds each position of each beam. When the capacity grows (every 32
  positions) the cache is re-laid out on the device by one strided copy.
- Per step the host uploads the beams' last tokens, the position and the slot map, and reads back the
  log-probabilities and unit weights: the decoding loop, its filters and the search are `generation.py`'s, shared
  with every backend.

An input over an engine's profile is refused before it runs (`InputTooLongError` naming the axis and the
maximum); plans built with another TensorRT version or for another GPU architecture are refused at load.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .. import constants as C
from .. import kinds
from ..bundle import Bundle, check_engine_host
from ..configs.model import step_shape
from ..errors import BackendError, BackendUnavailableError, BundleError, InputTooLongError
from ..memory import available_memory
from ..unit_batch import UnitBatch
from ..unit_cache import UnitCache
from .base import BeamSlots, fixed_decoder_inputs, scatter_top

logger = logging.getLogger("locsum_sdk")


MIN_TENSORRT = (10, 9)  # ahead-of-time plugins through the ONNX parser
TENSORRT_VERSION = "10.16.1.11"  # what the gpu extra pins and the plugin contract tests run against


def import_tensorrt(advice: str) -> Any:
    """TensorRT (10.9 or later), or a typed error ending in `advice` (what to install or do instead)."""
    try:
        import tensorrt as trt
    except (ImportError, OSError) as err:
        raise BackendUnavailableError(f"TensorRT cannot be loaded ({err}); {advice}") from None
    version = tuple(int(p) for p in trt.__version__.split(".")[:2])
    if version < MIN_TENSORRT:
        raise BackendUnavailableError(f"TensorRT {trt.__version__} is installed; engines with the locsum plugins "
                                      f"need {'.'.join(map(str, MIN_TENSORRT))} or later")
    return trt


def check_profile(graph: str, name: str, shape: tuple[int, ...], profile: list[list[int]]) -> None:
    """Refuse a shape outside the input's profile [min, opt, max], naming the axis and what to do."""
    low, _, high = profile
    if len(shape) != len(high):
        raise BackendError(f"{graph} input {name} has shape {shape}, the engine takes rank {len(high)}")
    for axis, (size, least, most) in enumerate(zip(shape, low, high)):
        if size > most or size < least:
            raise InputTooLongError(
                f"the {graph} engine takes {name} with axis {axis} between {least} and {most}; this input needs "
                f"{size}. Build engines with larger maxima (locsum export --trt --max-units/--max-unit-len/"
                "--max-batch/--max-beams/--max-steps), or summarize it with the onnxruntime backend"
            )


ALIGNMENT = 256  # bytes: TensorRT's alignment for every input and output address


class Engine:
    """One plan: its execution context and a device buffer per input and output, at the profile's maxima, except
    the outputs in `external`, which the caller binds to its own memory (the encoder's cross keys/values, written
    into the decoder's grid); one of those gets a buffer of its own only if the caller's address is not aligned."""

    def __init__(self, backend: TensorRTBackend, graph: str, external: frozenset[str] = frozenset()):
        trt, cuda = backend.trt, backend.cuda
        self.graph, self.backend = graph, backend
        file = backend.bundle.file(backend.bundle.manifest.tensorrt["plans"][graph])
        self.engine = backend.runtime.deserialize_cuda_engine(file.read_bytes())
        if self.engine is None:
            raise BundleError(f"TensorRT could not deserialize {file}; build the engines again")
        self.context = self.engine.create_execution_context()
        self.profile = backend.bundle.manifest.tensorrt["profiles"][graph]
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        declared = backend.graphs[graph]
        extras = [t.name for t in declared.extra_outputs]
        if self.inputs != declared.input_names or sorted(self.outputs) not in (
                sorted(declared.output_names), sorted(declared.output_names + extras)):
            raise BundleError(f"the {graph} plan has inputs {self.inputs} and outputs {self.outputs}, not those of a "
                              f"{backend.kind.name} {graph}; build the engines again")
        self.dtypes = {n: np.dtype(trt.nptype(self.engine.get_tensor_dtype(n))) for n in names}
        for name in self.inputs:
            self.context.set_input_shape(name, self.profile[name][2])
        self.buffers, self.max_bytes = {}, {}
        for name in names:
            shape = self.profile[name][2] if name in self.inputs else tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise BundleError(f"the {graph} plan's {name} has no bounded shape ({shape}); build the engines again")
            self.max_bytes[name] = int(np.prod(shape)) * self.dtypes[name].itemsize
            if name not in external:
                self.buffers[name] = cuda.DeviceBuffer(self.max_bytes[name])
        self.bound_elsewhere = frozenset(external)  # outputs the caller binds to its own buffers

    def shape(self, name: str, shape: tuple[int, ...]) -> None:
        check_profile(self.graph, name, shape, self.profile[name])
        if not self.context.set_input_shape(name, shape):
            raise BackendError(f"TensorRT refused shape {shape} for {self.graph} input {name}")

    def upload(self, name: str, value: np.ndarray) -> None:
        """Set an input's shape and copy its value into the input's buffer."""
        value = np.ascontiguousarray(value, dtype=self.dtypes[name])
        self.shape(name, value.shape)
        self.buffers[name].upload(value, self.backend.stream)
        self.bind(name, self.buffers[name].pointer)

    def bind(self, name: str, pointer: int) -> None:
        """Give TensorRT the address of an input or output (ALIGNMENT-aligned: see `own`)."""
        if pointer % ALIGNMENT or not self.context.set_tensor_address(name, pointer):
            raise BackendError(f"TensorRT refused the address of the {self.graph}'s {name} ({pointer:#x}; it must be "
                               f"a device address aligned to {ALIGNMENT} bytes)")

    def own(self, name: str) -> Any:
        """A buffer of this engine's own for the external output `name` (allocated at its maximum the first time),
        for when the caller's address is not aligned."""
        if name not in self.buffers:
            self.buffers[name] = self.backend.cuda.DeviceBuffer(self.max_bytes[name])
        return self.buffers[name]

    def execute(self) -> None:
        for name in self.outputs:
            if name not in self.bound_elsewhere:
                self.bind(name, self.buffers[name].pointer)
        if not self.context.execute_async_v3(self.backend.stream.pointer):
            raise BackendError(f"TensorRT failed running the {self.graph}; see its log above")

    def download(self, name: str) -> np.ndarray:
        shape = tuple(self.context.get_tensor_shape(name))
        return self.buffers[name].download(np.empty(shape, dtype=self.dtypes[name]), self.backend.stream)


class TensorRTBackend:
    name = "tensorrt"
    caches_units = False  # the grid is device memory, written by the encoder engine only

    def __init__(self, bundle: Bundle):
        from . import cuda

        if not bundle.manifest.tensorrt:
            raise BundleError(f"{bundle.path} has no TensorRT engines; build them with "
                              f"`locsum export --trt --bundle {bundle.path}`")
        self.trt = import_tensorrt("the tensorrt backend needs pip install 'locsum[gpu]' on a machine with an "
                                   "NVIDIA GPU, then engines built with `locsum export --trt --bundle DIR`")
        self.cuda, self.bundle, self.identity = cuda, bundle, bundle.fingerprint
        gpu, capability = cuda.device()
        check_engine_host(bundle.manifest, self.trt.__version__, capability)
        logger.info("tensorrt backend on %s (compute capability %s)", gpu, capability)
        self.config = bundle.manifest.model
        self.kind = kinds.get(bundle.manifest.kind, BundleError).on(bundle.manifest.model)
        self.shape = step_shape(self.config)
        self.layers = self.shape.layers
        self.graphs = self.kind.graphs(self.config)
        self.stream = cuda.Stream()
        self.runtime = self.trt.Runtime(self.trt.Logger(self.trt.Logger.WARNING))
        self.decoder = Engine(self, "decoder")
        crosses = frozenset(n for n in self.decoder.inputs if n.startswith(("cross_key.", "cross_value.")))
        self.engines = {graph: self.decoder if graph == "decoder" else
                        Engine(self, graph, crosses if graph == "encoder" else frozenset()) for graph in self.graphs}
        self.cross = {}  # the grid's cross keys/values, one buffer per tensor at the decoder profile's maximum
        self.cache = {}  # (past, present) -> two buffers at the profile's maximum
        for name in self.decoder.inputs:
            if name.startswith(("cross_key.", "cross_value.")):
                self.cross[name] = self.decoder.buffers[name]
        for i in range(self.layers):
            for past, present in ((C.past_key(i), C.present_key(i)), (C.past_value(i), C.present_value(i))):
                self.cache[past, present] = [self.decoder.buffers[past], self.decoder.buffers[present]]
        self.decoder.bound_elsewhere = frozenset(present for _, present in self.cache)

    def start(self, batch: UnitBatch, beams: int, unit_batch_size: int,
              cache: UnitCache | None = None) -> TensorRTSession:
        """`cache` is not read: see `caches_units`."""
        return TensorRTSession(self, batch, beams, unit_batch_size)

    def free_memory(self) -> int | None:
        """This machine's available memory: the device buffers are allocated at load for the profiles' maxima,
        which bound what a call takes on the GPU (an input past them is refused by the profiles)."""
        return available_memory()

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one of the kind's graphs (a selection stage's scoring) and return its outputs by name."""
        if graph not in self.engines:
            raise BackendError(f"a {self.kind.name} bundle has no {graph!r} graph; it has {sorted(self.engines)}")
        engine = self.engines[graph]
        for name in engine.inputs:
            engine.upload(name, inputs[name])
        engine.execute()
        return {name: engine.download(name) for name in self.graphs[graph].output_names}


class TensorRTSession:
    def __init__(self, backend: TensorRTBackend, batch: UnitBatch, beams: int, unit_batch_size: int):
        cfg = backend.config
        self.backend, self.batch, self.beams, self.layout = backend, batch, beams, backend.kind.layout
        self.rows = batch.batch * batch.width
        self.heads, self.head_dim = backend.shape.cache_heads, backend.shape.head_dim
        self.length = batch.input_ids.shape[1]
        self._encode(unit_batch_size)
        decoder = backend.decoder
        for name, value in fixed_decoder_inputs(self.layout, batch, backend.graphs["decoder"]).items():
            decoder.upload(name, value)
        for name, buffer in backend.cross.items():
            shape = (self.rows, self.heads, self.head_dim, self.length) if name.startswith("cross_key.") else (
                self.rows, self.heads, self.length, self.head_dim)
            decoder.shape(name, shape)
            decoder.bind(name, buffer.pointer)
        self.slots = BeamSlots(batch.batch, beams)
        self.partial_log_probs = C.TOP_TOKENS in decoder.outputs  # only each beam's best tokens come to the host
        self.log_probs = np.zeros((batch.batch, beams, cfg["vocab_size"]), dtype=np.float32)
        self.groups = self.layout.cache_groups(batch.batch, batch.width, backend.shape)
        self.current = {key: 0 for key in backend.cache}  # which of the two buffers holds the past
        for buffers in backend.cache.values():
            buffers[0].zero(backend.stream)

    def _encode(self, unit_batch_size: int) -> None:
        """Encoder runs of `unit_batch_size` units; each writes its cross K/V into the grid at its first row."""
        backend, batch = self.backend, self.batch
        encoder = backend.engines["encoder"]
        row_bytes = {name: self.heads * self.head_dim * self.length * encoder.dtypes[name].itemsize
                     for name in backend.cross}
        for first, end, row in self.layout.encoder_runs(batch, unit_batch_size):
            for name, value in self.layout.encoder_inputs(batch, first, end).items():
                encoder.upload(name, value)
            staged = []  # outputs whose place in the grid is not aligned: written to the engine's own buffer first
            for name, buffer in backend.cross.items():
                target = buffer.pointer + row * row_bytes[name]
                if target % ALIGNMENT:
                    staged.append((name, target))
                    target = encoder.own(name).pointer
                encoder.bind(name, target)
            encoder.execute()
            for name, target in staged:
                encoder.own(name).copy_to(target, (end - first) * row_bytes[name], backend.stream)

    def _bind_cache(self, reshape: bool) -> None:
        """Bind each layer's past and present buffers (they swap every step); `reshape` when the capacity changed."""
        decoder, capacity = self.backend.decoder, self.slots.capacity
        for i, groups in enumerate(self.groups):
            for past, present in ((C.past_key(i), C.present_key(i)), (C.past_value(i), C.present_value(i))):
                buffers, now = self.backend.cache[past, present], self.current[past, present]
                if reshape:
                    decoder.shape(past, (groups, self.heads, self.beams, capacity, self.head_dim))
                decoder.bind(past, buffers[now].pointer)
                decoder.bind(present, buffers[1 - now].pointer)

    def _grow_cache(self, old: int) -> None:
        """Re-lay the past of every layer out for the new capacity (into the free buffer), on the device."""
        stream, new = self.backend.stream, self.slots.capacity
        size = self.head_dim * self.backend.decoder.dtypes[C.past_key(0)].itemsize  # bytes of one position
        for i, groups in enumerate(self.groups):
            for key in ((C.past_key(i), C.present_key(i)), (C.past_value(i), C.present_value(i))):
                buffers, now = self.backend.cache[key], self.current[key]
                buffers[1 - now].zero(stream)
                buffers[1 - now].copy_rows(buffers[now], groups * self.heads * self.beams, old * size, new * size,
                                           old * size, stream)
                self.current[key] = 1 - now

    def step(self, tokens: np.ndarray, beam_index: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        decoder, old = self.backend.decoder, self.slots.capacity
        grew = self.slots.advance(beam_index)
        if grew:
            self._grow_cache(old)
        decoder.upload(C.INPUT_IDS, tokens)
        decoder.upload(C.POSITION, np.array([self.slots.position], dtype=np.int64))
        decoder.upload(C.CACHE_SLOTS, self.slots.slots)
        self._bind_cache(reshape=grew or self.slots.position == 0)
        decoder.execute()
        for key in self.current:
            self.current[key] = 1 - self.current[key]  # the present just written is the next step's past
        if self.partial_log_probs:
            top = scatter_top(decoder.download(C.TOP_LOG_PROBS), decoder.download(C.TOP_TOKENS), self.log_probs)
            return top, decoder.download(C.UNIT_WEIGHTS)
        return decoder.download(C.LOG_PROBS), decoder.download(C.UNIT_WEIGHTS)

    def full_log_probs(self) -> np.ndarray:
        return self.backend.decoder.download(C.LOG_PROBS)  # still on the device until the next step runs

    def close(self) -> None:
        self.backend.stream.synchronize()
