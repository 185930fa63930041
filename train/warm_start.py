"""A BERT2BERT warm start (Rothe et al. 2020): a pretrained BERT (all-MiniLM-L6-v2, the one pretrained model we
have) as the encoder of a BART-shaped PageSum, and as its decoder's initialization, the cross-attention new.

The BERT's layers map onto BART's one for one (both post-LayerNorm, same products; `bert.from_hf_bert_names`): the
encoder takes every weight; each decoder layer takes the same BERT layer's self-attention and feed-forward, its
cross-attention drawn at random (std 0.02, LayerNorm 1 and 0), as in the paper. One token table serves the encoder,
the decoder and the LM head (tied); BERT's token type 0 embedding is folded into the position tables (BART's rows
start at 2). What is not BERT's: LayerNorm epsilon is BART's 1e-5 (BERT's 1e-12; the encoder's states differ by
about 1e-5 relative), and the decoder is causal. Special tokens: [CLS] starts units and the decoder, [SEP] ends
them, [PAD] pads. The result is our checkpoint (config, weights, the BERT's tokenizer), to start fine-tuning from
(`init_from`); other kinds convert it as they convert any PageSum checkpoint.

    python -m train.warm_start --bert ~/.cache/locsum/minilm --output ~/.cache/locsum/bert2bert-minilm
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from locsum_sdk.configs.model import BartConfig
from locsum_sdk.errors import BundleError
from locsum_sdk.modeling.bert import from_hf_bert_names
from locsum_sdk.modeling.checkpoint import save_checkpoint
from locsum_sdk.modeling.pagesum import PageSum
from locsum_sdk.modeling.weights import read_state_dict

POSITION_OFFSET = 2  # BART's learned positions start at row 2
SPECIAL = ("[CLS]", "[SEP]", "[PAD]")


def bart_config(bert: dict, tokenizer: dict) -> BartConfig:
    """The BART shape of an HF BERT config (its `config.json` as a dict), with the tokenizer's special ids."""
    found = bert.get("model_type"), bert.get("hidden_act")
    if found != ("bert", "gelu"):
        raise BundleError(f"a warm start reads a BERT with gelu activations, not the {found[0]!r} model with "
                          f"{found[1]!r} activations this config describes")
    vocab = tokenizer["model"]["vocab"]
    missing = [token for token in SPECIAL if token not in vocab]
    if missing:
        raise BundleError(f"the BERT's tokenizer has no {missing}; pass a WordPiece BERT tokenizer")
    return BartConfig(vocab_size=bert["vocab_size"], d_model=bert["hidden_size"],
                      encoder_layers=bert["num_hidden_layers"], decoder_layers=bert["num_hidden_layers"],
                      encoder_heads=bert["num_attention_heads"], decoder_heads=bert["num_attention_heads"],
                      encoder_ffn_dim=bert["intermediate_size"], decoder_ffn_dim=bert["intermediate_size"],
                      max_positions=bert["max_position_embeddings"], activation="gelu", scale_embedding=False,
                      pad_token_id=vocab["[PAD]"], bos_token_id=vocab["[CLS]"], eos_token_id=vocab["[SEP]"],
                      decoder_start_token_id=vocab["[CLS]"])


def bert2bert(bert_state: dict[str, torch.Tensor], config: BartConfig, seed: int = 0) -> PageSum:
    """A PageSum whose encoder is the BERT and whose decoder starts from it (see the module docstring)."""
    bert = from_hf_bert_names(bert_state)
    torch.manual_seed(seed)
    model = PageSum(config)
    model.reset_parameters(0.02)  # what BERT does not give: cross-attention, page_conf
    state = model.state_dict()
    positions = bert["position_embeddings.weight"] + bert["token_type_embeddings.weight"][0]
    state["model.shared.weight"] = bert["word_embeddings.weight"]
    state["model.final_logits_bias"] = torch.zeros_like(state["model.final_logits_bias"])
    for side in ("encoder", "decoder"):
        table = torch.zeros_like(state[f"model.{side}.embed_positions.weight"])
        table[POSITION_OFFSET : POSITION_OFFSET + positions.shape[0]] = positions
        state[f"model.{side}.embed_positions.weight"] = table
        for part in ("weight", "bias"):
            state[f"model.{side}.layernorm_embedding.{part}"] = bert[f"layernorm_embedding.{part}"]
    for name, tensor in bert.items():
        if name.startswith("layers."):
            state[f"model.encoder.{name}"] = tensor
            state[f"model.decoder.{name}"] = tensor.clone()  # self-attention and feed-forward; cross is new
    for i in range(config.decoder_layers):
        norm = f"model.decoder.layers.{i}.encoder_attn_layer_norm"
        state[f"{norm}.weight"], state[f"{norm}.bias"] = (torch.ones(config.d_model), torch.zeros(config.d_model))
    model.load_state_dict(state, strict=True)
    return model.eval()


def warm_start(bert_dir: str | Path, output: str | Path, seed: int = 0) -> Path:
    """Write the BERT2BERT checkpoint of the HF BERT in `bert_dir` (config.json, model.safetensors, tokenizer.json)
    to `output`, its pages as long as the BERT's positions."""
    bert_dir = Path(bert_dir).expanduser()
    files = [bert_dir / name for name in ("config.json", "model.safetensors", "tokenizer.json")]
    absent = [f.name for f in files if not f.is_file()]
    if absent:
        raise BundleError(f"{bert_dir} has no {absent}: pass an HF BERT directory (config.json, model.safetensors, "
                          "tokenizer.json)")
    config = bart_config(json.loads(files[0].read_text()), json.loads(files[2].read_text(encoding="utf-8")))
    model = bert2bert(read_state_dict(files[1]), config, seed)
    return save_checkpoint(model, Path(output).expanduser(), files[2], units={"page_tokens": config.max_positions},
                           warm_start={"from": str(bert_dir), "method": "bert2bert", "seed": seed})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.warm_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bert", required=True, help="HF BERT directory (all-MiniLM-L6-v2 as its package exports)")
    parser.add_argument("--output", required=True, help="checkpoint directory to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of the new cross-attention")
    args = parser.parse_args(argv)
    print(f"wrote {warm_start(args.bert, args.output, args.seed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
