"""The PyTorch reference backend: runs `locsum_sdk.modeling` directly, with the same layout as the exported graphs,
on the CPU or a CUDA GPU (`device`; with `locsum_sdk.kernels.torch_ops.use_triton()` the custom ops run their
Triton kernels there; the decoding step replays CUDA graphs there, `step_graphs`)."""

from __future__ import annotations

import functools
import hashlib
import json
import logging

import numpy as np

from .. import constants as C
from .. import kinds
from ..configs.model import step_shape
from ..errors import BackendError, BackendUnavailableError
from ..generation import GenerationOptions, Hypothesis, generate
from ..memory import available_memory
from ..threads import requested_threads
from ..unit_cache import UnitCache
from ..units import Unit
from .base import (
    BeamSlots,
    UnitBatch,
    encode_through_cache,
    fixed_decoder_inputs,
    grown_cache,
    length_axes,
    write_unit,
)
from .step_graphs import StepGraphs, capture_unsupported

logger = logging.getLogger("locsum_sdk")


def _import_torch():
    try:
        import torch
    except ImportError:
        raise BackendUnavailableError("the torch backend needs PyTorch: pip install 'locsum[torch]'") from None
    return torch


class TorchBackend:
    name = "torch"
    caches_units = True

    def __init__(self, model, threads: int | None = None, device: str = "cpu", cuda_graphs: bool | None = None):
        """`cuda_graphs`: replay the decoding step from CUDA graphs (`step_graphs`): None where the device can,
        False never, True where it can (elsewhere the step runs eagerly, with a log line saying why)."""
        self.torch = _import_torch()
        import torch._dynamo  # noqa: F401  the custom ops' first call imports it (seconds): at load, not in a summary
        threads = threads or requested_threads()  # neither: torch's own default (its physical cores)
        if threads:
            self.torch.set_num_threads(threads)
        if device == "auto":
            device = "cuda" if self.torch.cuda.is_available() else "cpu"
        if device == "cuda" and not self.torch.cuda.is_available():
            raise BackendUnavailableError("device='cuda': this torch sees no CUDA GPU (a CPU build, or no GPU here)")
        self.device = device
        unsupported = capture_unsupported(self.torch, device)
        if cuda_graphs and unsupported:
            logger.info("cuda_graphs: %s; the decoding step runs eagerly", unsupported)
        self.cuda_graphs = bool(cuda_graphs is not False and not unsupported)
        self.model = model.eval().to(device)
        self.kind = kinds.get(model.kind, BackendError).on(model.config.to_dict())
        self.graphs = self.kind.graphs(model.config.to_dict())  # each graph's declared IO

    @functools.cached_property
    def identity(self) -> str:
        """A digest of the model's config and weights."""
        digest = hashlib.sha256(json.dumps(self.model.config.to_dict(), sort_keys=True).encode())
        for name, value in self.model.state_dict().items():
            digest.update(name.encode())
            digest.update(value.detach().cpu().contiguous().view(-1).view(self.torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    def start(self, batch: UnitBatch, beams: int, unit_batch_size: int,
              cache: UnitCache | None = None) -> TorchSession:
        return TorchSession(self, batch, beams, unit_batch_size, cache)

    def free_memory(self) -> int | None:
        """On CUDA the GPU's free memory and what torch's caching allocator holds unused; on the CPU this
        machine's available memory."""
        if self.device != "cuda":
            return available_memory()
        cuda = self.torch.cuda
        return int(cuda.mem_get_info()[0] + cuda.memory_reserved() - cuda.memory_allocated())

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one of the kind's graphs other than the encoder and decoder (a selection stage's): the model's
        method of that name takes the graph's inputs by name and returns its outputs in declared order."""
        io = self.graphs.get(graph)
        if io is None or graph in ("encoder", "decoder") or not callable(getattr(self.model, graph, None)):
            raise BackendError(f"the torch {self.kind.name} model has no {graph!r} graph to run")
        with self.torch.inference_mode():
            outputs = getattr(self.model, graph)(**{name: self.tensor(value) for name, value in inputs.items()})
        if isinstance(outputs, self.torch.Tensor):  # a graph with one output
            outputs = (outputs,)
        return {name: value.cpu().numpy() for name, value in zip(io.output_names, outputs)}

    def tensor(self, value: np.ndarray):
        """A host array as a tensor on the backend's device."""
        return self.torch.from_numpy(np.ascontiguousarray(value)).to(self.device)


class TorchSession:
    partial_log_probs = False

    def __init__(self, backend: TorchBackend, batch: UnitBatch, beams: int, unit_batch_size: int,
                 cache: UnitCache | None = None):
        torch, tensor = backend.torch, backend.tensor
        self.torch, self.model, self.batch, self.beams, self.tensor = torch, backend.model, batch, beams, tensor
        layout, shape = backend.kind.layout, step_shape(self.model.config.to_dict())
        rows, length = batch.batch * batch.width, batch.input_ids.shape[1]
        dtype = next(self.model.parameters()).dtype
        heads, dim = shape.cache_heads, shape.head_dim
        # per layer, the grid's cross key (N, H, d, L) and value (N, H, L, d), written run by run
        self.cross = [(torch.zeros(rows, heads, dim, length, dtype=dtype, device=backend.device),
                       torch.zeros(rows, heads, length, dim, dtype=dtype, device=backend.device))
                      for _ in range(shape.layers)]
        with torch.inference_mode():
            if cache is not None and layout.units_alone:
                self._encode_cached(backend, unit_batch_size, cache)
            else:
                self._encode(layout, unit_batch_size)
        self.fixed = {name: tensor(value)
                      for name, value in fixed_decoder_inputs(layout, batch, backend.graphs["decoder"]).items()}
        self.slots = BeamSlots(batch.batch, beams)
        self.graphs = StepGraphs(torch, backend.device) if backend.cuda_graphs else None
        self.cache = [
            tuple(torch.zeros(groups, heads, beams, self.slots.capacity, dim, dtype=dtype, device=backend.device)
                  for _ in "kv")
            for groups in layout.cache_groups(batch.batch, batch.width, shape)
        ]

    def _encode(self, layout, unit_batch_size: int) -> None:
        """Every unit encoded, run by run, into the grid."""
        for first, end, row in layout.encoder_runs(self.batch, unit_batch_size):
            inputs = {name: self.tensor(v) for name, v in layout.encoder_inputs(self.batch, first, end).items()}
            _, cross = self.model.encode(**inputs)
            for grid, part in zip(self.cross, cross):
                for target, values in zip(grid, part):
                    target[row : row + end - first] = values

    def _encode_cached(self, backend: TorchBackend, unit_batch_size: int, cache: UnitCache) -> None:
        """Units found in `cache` are copied into the grid; the others are encoded, copied there and stored."""
        axes = length_axes(backend.graphs["encoder"])
        names = [name for i in range(len(self.cross)) for name in (C.cross_key(i), C.cross_value(i))]

        def encode(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            _, cross = self.model.encode(**{name: self.tensor(value) for name, value in inputs.items()})
            return dict(zip(names, (t.cpu().numpy() for kv in cross for t in kv)))

        def write(row: int, name: str, array: np.ndarray) -> None:
            layer, which = divmod(names.index(name), 2)
            write_unit(self.cross[layer][which], row, axes[name],
                       self.torch.tensor(array, device=backend.device))  # cached arrays are read-only

        encode_through_cache(self.batch, backend.kind.layout, lambda tokens: unit_batch_size, cache, backend.identity,
                             axes, encode, write)

    def step(self, tokens: np.ndarray, beam_index: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        torch = self.torch
        if self.slots.advance(beam_index):
            capacity = self.slots.capacity
            self.cache = [tuple(grown_cache(t, capacity, t.new_zeros) for t in layer) for layer in self.cache]
        inputs = {"input_ids": tokens, "position": np.array([self.slots.position]), "cache_slots": self.slots.slots}
        with torch.inference_mode():
            if self.graphs is None:
                log_probs, weights = self._step({name: self.tensor(value) for name, value in inputs.items()})
            else:  # one bucket per cache capacity: the cache's tensors are replaced when it grows
                log_probs, weights = self.graphs.step(self.slots.capacity, inputs, self._step)
        self.log_probs = log_probs.float().cpu().numpy()  # numpy has no bfloat16; the search runs in float32
        return self.log_probs, weights.float().cpu().numpy()

    def _step(self, inputs: dict):
        return self.model.step(**inputs, cache=self.cache, cross=self.cross, **self.fixed)

    def full_log_probs(self) -> np.ndarray:
        return self.log_probs

    def close(self) -> None:
        self.cache, self.cross, self.graphs = [], [], None


def generate_from_ids(model, units: list[list[tuple[int, ...]]], options: GenerationOptions | None = None,
                      unit_batch_size: int = 4, device: str = "cpu", cuda_graphs: bool | None = None
                      ) -> list[Hypothesis]:
    """Reference generation in torch from token ids: each item's units -> its best hypothesis.

    The decoding loop is `locsum_sdk.generation`, the one every backend runs; this skips the tokenizer and paging,
    for training-time evaluation and parity checks."""
    options = options or GenerationOptions()
    cfg = model.config
    items = [[Unit(0, 0, 0, "", tuple(ids)) for ids in item] for item in units]
    batch = UnitBatch.from_units(items, cfg.pad_token_id)
    session = TorchBackend(model, device=device, cuda_graphs=cuda_graphs).start(batch, options.num_beams,
                                                                                unit_batch_size)
    try:
        return generate(session, batch.batch, options, cfg.decoder_start_token_id, cfg.eos_token_id, cfg.pad_token_id)
    finally:
        session.close()
