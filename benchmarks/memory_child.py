"""One memory point of an HF baseline in a fresh process: generate from an input of N tokens (greedy, a fixed
number of steps), report the process's peak RSS as JSON. (locsum's own points are `locsum_sdk.profiling`.)

Systems: `led` (HF LED, sliding window attention, LED-base shape) and `bart-full` (HF BART with full eager
attention over the whole input and its 1024 learned positions copied to cover it: the quadratic baseline).
Random weights.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import BART_BASE  # noqa: E402
from locsum_sdk.profiling import peak_rss_mb, rss_mb  # noqa: E402

HF_SYSTEMS = ("led", "bart-full")


def hf_model(system: str, tokens: int):
    import torch
    import transformers

    shape = dict(vocab_size=BART_BASE["vocab_size"], d_model=768, encoder_layers=6, decoder_layers=6,
                 encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)
    torch.manual_seed(0)
    if system == "led":
        config = transformers.LEDConfig(max_encoder_position_embeddings=max(tokens, 1024),
                                        max_decoder_position_embeddings=1024, attention_window=1024, **shape)
        return transformers.LEDForConditionalGeneration(config).eval()
    config = transformers.BartConfig(max_position_embeddings=max(tokens, 1024), attn_implementation="eager", **shape)
    model = transformers.BartForConditionalGeneration(config).eval()
    with torch.no_grad():  # extend 1024 learned positions by copying them, as long-input BART variants do
        for positions in (model.model.encoder.embed_positions, model.model.decoder.embed_positions):
            table = positions.weight
            table[2:] = table[2:1026].repeat((table.shape[0] - 2) // 1024 + 1, 1)[: table.shape[0] - 2]
    return model


def hf_point(system: str, tokens: int, steps: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    model = hf_model(system, tokens)
    ids = torch.randint(5, BART_BASE["vocab_size"], (1, tokens))
    ids[0, 0], ids[0, -1] = 0, 2
    extra = {}
    if system == "led":
        extra["global_attention_mask"] = torch.zeros_like(ids)
        extra["global_attention_mask"][0, 0] = 1
    loaded = rss_mb()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=1, do_sample=False,
                             max_length=steps + 1, min_length=steps + 1, **extra)
    return {"tokens": tokens, "pages": 1, "steps": out.shape[1] - 1, "peak_rss_mb": peak_rss_mb(),
            "loaded_rss_mb": loaded, "token_ids": out[0, 1:].tolist()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", required=True, choices=HF_SYSTEMS)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(hf_point(args.system, args.tokens, args.steps, args.threads)))


if __name__ == "__main__":
    main()
