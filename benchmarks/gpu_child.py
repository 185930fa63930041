"""One GPU measurement in a process of its own (the custom ops' Triton kernels are registered process-wide):

    python -m benchmarks.gpu_child CHECKPOINT MODE UNITS UNIT_TOKENS BEAMS STEPS

MODE "torch" runs the torch reference backend on CUDA with the ops' torch maths, "triton" with their Triton
kernels, each step eagerly; "torch+graphs" and "triton+graphs" replay the step from CUDA graphs. CHECKPOINT may
name the kind to load it as after a colon (CKPT:hierencdec). Encodes one item of UNITS units of UNIT_TOKENS random
tokens, decodes STEPS steps greedily per beam; prints JSON: median step milliseconds, the tokens, the peak of
CUDA memory allocated and the bytes a step reads at least (`step_bytes`).
"""

from __future__ import annotations

import json
import sys
import time


def main(checkpoint: str, mode: str, units: int, unit_tokens: int, beams: int, steps: int) -> dict:
    import numpy as np
    import torch

    from locsum_sdk.backends.base import UnitBatch
    from locsum_sdk.backends.torch import TorchBackend
    from locsum_sdk.generation import GenerationOptions, generate
    from locsum_sdk.modeling.checkpoint import load_checkpoint
    from locsum_sdk.units import Unit

    ops, _, graphs = mode.partition("+")
    if ops == "triton":
        from locsum_sdk.kernels.torch_ops import use_triton

        use_triton()
    path, _, kind = checkpoint.partition(":")
    model = load_checkpoint(path, kind=kind or None).model.float()
    cfg = model.config
    rng = np.random.default_rng(0)
    items = [[Unit(0, 0, 0, "", tuple(int(t) for t in rng.integers(4, cfg.vocab_size, unit_tokens)))
              for _ in range(units)]]
    batch = UnitBatch.from_units(items, cfg.pad_token_id)
    backend = TorchBackend(model, device="cuda", cuda_graphs=graphs == "graphs")
    times: list[float] = []

    class Timed:
        def __init__(self, session):
            self.session, self.partial_log_probs = session, session.partial_log_probs

        def step(self, tokens, beam_index):
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = self.session.step(tokens, beam_index)  # returns host arrays: synchronized
            times.append(time.perf_counter() - start)
            return out

        def full_log_probs(self):
            return self.session.full_log_probs()

    options = GenerationOptions(num_beams=beams, max_length=steps + 1, min_length=steps + 1)
    warm = GenerationOptions(num_beams=beams, max_length=3)
    for run_options in (warm, options):
        times.clear()
        torch.cuda.reset_peak_memory_stats()
        session = backend.start(batch, beams, unit_batch_size=4)
        try:
            hypothesis = generate(Timed(session), 1, run_options, cfg.decoder_start_token_id, cfg.eos_token_id,
                                  cfg.pad_token_id)[0]
        finally:
            session.close()
    return {"median_ms": 1000 * float(np.median(times[1:])), "tokens": hypothesis.token_ids,
            "peak_bytes": int(torch.cuda.max_memory_allocated()), "device": torch.cuda.get_device_name(0),
            "step_bytes": step_bytes(model, units, unit_tokens, beams, steps)}


def step_bytes(model, units: int, unit_tokens: int, beams: int, steps: int) -> int:
    """Bytes a decoding step reads at least: the weights it runs (every parameter but the encoder's and a
    selection stage's), the units' keys and values in every layer, and the summary's own cache at its mean length."""
    from locsum_sdk.modeling.config import step_shape

    shape = step_shape(model.config.to_dict())
    element = next(model.parameters()).element_size()
    weights = sum(p.numel() * p.element_size() for name, p in model.named_parameters()
                  if ".encoder." not in f".{name}" and not name.startswith(("extractor.", "ranker.")))
    per_position = shape.layers * 2 * shape.cache_heads * shape.head_dim * element
    return weights + per_position * (units * unit_tokens + beams * steps // 2)


if __name__ == "__main__":
    checkpoint, mode, *numbers = sys.argv[1:]
    print(json.dumps(main(checkpoint, mode, *map(int, numbers))))
