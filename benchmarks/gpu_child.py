"""One GPU measurement in a process of its own (the custom ops' Triton kernels are registered process-wide):

    python -m benchmarks.gpu_child CHECKPOINT MODE UNITS UNIT_TOKENS BEAMS STEPS

MODE "torch" runs the torch reference backend on CUDA with the ops' torch maths, "triton" with their Triton
kernels, each step eagerly; "torch+graphs" and "triton+graphs" replay the step from CUDA graphs, and "+profile" (e.g.
"torch+profile") records the timed steps' CUDA kernels with torch.profiler (`kernel_table`); "hf" runs HF
transformers' `generate` at the checkpoint's shape (random weights) for STEPS new tokens per beam: on a BART
backbone `BartForConditionalGeneration` on one unit, the input cut to its first UNIT_TOKENS tokens as a user of it
would; on a Llama backbone `LlamaForCausalLM` on the UNITS x UNIT_TOKENS tokens as one prompt. CHECKPOINT may
name the kind to load it as after a colon (CKPT:hierencdec). Encodes one item of UNITS units of UNIT_TOKENS random
tokens, decodes STEPS steps greedily per beam; prints JSON: median step milliseconds, the tokens, the peak of
CUDA memory allocated and the bytes a step reads at least (`step_bytes`).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time


def main(checkpoint: str, mode: str, units: int, unit_tokens: int, beams: int, steps: int) -> dict:
    import numpy as np
    import torch

    from locsum_sdk.backends.torch import TorchBackend
    from locsum_sdk.generation import GenerationOptions, generate
    from locsum_sdk.modeling.checkpoint import load_checkpoint
    from locsum_sdk.unit_batch import UnitBatch
    from locsum_sdk.units import Unit

    if mode == "hf":
        return hf_generate(checkpoint, units, unit_tokens, beams, steps)
    ops, *flags = mode.split("+")
    graphs, profile = "graphs" in flags, "profile" in flags
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
    backend = TorchBackend(model, device="cuda", cuda_graphs=graphs)
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
    recorder = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) if profile else None
    for run_options in (warm, options):
        times.clear()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        started = time.perf_counter()
        session = backend.start(batch, beams, unit_batch_size=4)
        torch.cuda.synchronize()
        encode_s = time.perf_counter() - started
        watched = recorder if recorder is not None and run_options is options else contextlib.nullcontext()
        try:
            with watched:  # every step returns host arrays: its kernels have run when the profile closes
                hypothesis = generate(Timed(session), 1, run_options, cfg.decoder_start_token_id, cfg.eos_token_id,
                                      cfg.pad_token_id)[0]
        finally:
            session.close()
    result = {"median_ms": 1000 * float(np.median(times[1:])), "decode_s": float(np.sum(times)), "encode_s": encode_s,
              "tokens_per_s": steps / float(np.sum(times)), "tokens": hypothesis.token_ids,
              "peak_bytes": int(torch.cuda.max_memory_allocated()), "device": torch.cuda.get_device_name(0),
              "step_bytes": step_bytes(model, units, unit_tokens, beams, steps)}
    if recorder is not None:
        result["kernels"] = kernel_table(recorder.key_averages(), len(times))
    return result


def kernel_table(averages, steps: int, top: int = 15) -> dict:
    """torch.profiler's averages of a run of `steps` decoding steps -> the GPU kernels' time a step (their sum is
    what a replayed graph still spends, launches aside), how many run a step, and the `top` kernels by time."""
    kernels = [event for event in averages if event.device_type.name == "CUDA"]
    kernels.sort(key=lambda event: event.self_device_time_total, reverse=True)
    return {"ms_per_step": sum(event.self_device_time_total for event in kernels) / 1000 / steps,
            "launches_per_step": sum(event.count for event in kernels) / steps,
            "top": [{"name": event.key[:120], "per_step": event.count / steps,
                     "ms_per_step": event.self_device_time_total / 1000 / steps} for event in kernels[:top]]}


def hf_generate(checkpoint: str, units: int, unit_tokens: int, beams: int, steps: int) -> dict:
    """HF transformers' `generate` at the checkpoint's shape (random weights), what a user would run instead: for a
    BART backbone `BartForConditionalGeneration` on the input cut to its positions, for a Llama backbone
    `LlamaForCausalLM` on the whole input (`units` x `unit_tokens`) as one prompt. Summary tokens per second over a
    timed run (after one warm-up run), the prompt's own time (a run of one new token) and the decoding's ms a token
    beyond it, and the peak of CUDA memory allocated."""
    import numpy as np
    import torch

    from locsum_sdk.configs.llama import LlamaConfig
    from locsum_sdk.modeling.checkpoint import load_checkpoint

    ours = load_checkpoint(checkpoint.partition(":")[0]).model.config
    torch.manual_seed(0)
    if isinstance(ours, LlamaConfig):
        model = hf_llama(ours).cuda().eval()
        length = min(units * unit_tokens, ours.max_positions - steps)
    else:
        model = hf_bart(ours).cuda().eval()
        length = min(unit_tokens, ours.max_positions)
    rng = np.random.default_rng(0)
    ids = torch.tensor(rng.integers(4, ours.vocab_size, (1, length)), device="cuda")
    options = dict(num_beams=beams, max_new_tokens=steps, min_new_tokens=steps, early_stopping=False,
                   do_sample=False, length_penalty=1.0)

    def timed(new: int):
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(ids, **{**options, "max_new_tokens": new, "min_new_tokens": new})
        torch.cuda.synchronize()
        return out, time.perf_counter() - start

    with torch.inference_mode():
        timed(3)
        _, prompt_s = timed(1)
        torch.cuda.reset_peak_memory_stats()
        out, seconds = timed(steps)
    return {"decode_s": seconds, "tokens_per_s": steps / seconds, "input_tokens": length, "prompt_s": prompt_s,
            "ms_per_token": 1000 * (seconds - prompt_s) / (steps - 1), "tokens": out[0].tolist(),
            "peak_bytes": int(torch.cuda.max_memory_allocated()), "device": torch.cuda.get_device_name(0)}


def hf_bart(ours):
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(BartConfig(
        vocab_size=ours.vocab_size, d_model=ours.d_model, encoder_layers=ours.encoder_layers,
        decoder_layers=ours.decoder_layers, encoder_attention_heads=ours.encoder_heads,
        decoder_attention_heads=ours.decoder_heads, encoder_ffn_dim=ours.encoder_ffn_dim,
        decoder_ffn_dim=ours.decoder_ffn_dim, max_position_embeddings=ours.max_positions,
        pad_token_id=ours.pad_token_id, bos_token_id=ours.bos_token_id, eos_token_id=ours.eos_token_id,
        decoder_start_token_id=ours.decoder_start_token_id, forced_bos_token_id=None, forced_eos_token_id=None))


def hf_llama(ours):
    """`LlamaForCausalLM` of our LlamaConfig's shape (SmolLM2's for the default), without adapters: a user's plain
    model of the same size."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(
        vocab_size=ours.vocab_size, hidden_size=ours.d_model, num_hidden_layers=ours.layers,
        num_attention_heads=ours.heads, num_key_value_heads=ours.kv_heads, intermediate_size=ours.ffn_dim,
        head_dim=ours.head_dim, rope_theta=ours.rope_base, rms_norm_eps=ours.rms_eps,
        max_position_embeddings=ours.max_positions, tie_word_embeddings=ours.tie_embeddings,
        attention_bias=ours.attention_bias, mlp_bias=ours.mlp_bias, bos_token_id=ours.bos_token_id,
        eos_token_id=ours.eos_token_id, pad_token_id=ours.pad_token_id))


def step_bytes(model, units: int, unit_tokens: int, beams: int, steps: int) -> int:
    """Bytes a decoding step reads at least: the weights it runs (every parameter but the encoder's and a
    selection stage's), the units' keys and values in every layer, and the summary's own cache at its mean length."""
    from locsum_sdk.configs.model import step_shape

    shape = step_shape(model.config.to_dict())
    element = next(model.parameters()).element_size()
    weights = sum(p.numel() * p.element_size() for name, p in model.named_parameters()
                  if ".encoder." not in f".{name}" and not name.startswith(("extractor.", "ranker.")))
    per_position = shape.layers * 2 * shape.cache_heads * shape.head_dim * element
    return weights + per_position * (units * unit_tokens + beams * steps // 2)


if __name__ == "__main__":
    checkpoint, mode, *numbers = sys.argv[1:]
    print(json.dumps(main(checkpoint, mode, *map(int, numbers))))
