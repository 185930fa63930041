"""The BERT2BERT warm start: a BERT's weights land in a BART-shaped PageSum (encoder equal to the BERT's states,
decoder self-attention and feed-forward from the same layers, cross-attention new), and the checkpoint summarizes
through the torch backend with the BERT's WordPiece tokens."""

import json
import random

import pytest
import torch
from conftest import document

from locsum_sdk.errors import BundleError
from locsum_sdk.modeling.checkpoint import load_checkpoint
from train.warm_start import main, warm_start

transformers = pytest.importorskip("transformers")


def bert_directory(path, layer_norm_eps: float = 1e-5):
    """A tiny HF BERT directory (config.json, model.safetensors, a WordPiece tokenizer.json with BERT's specials),
    its weights large enough that LayerNorm's epsilon is negligible beside the activations' variance."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    rng = random.Random(0)
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator([document(rng, 8) for _ in range(50)], trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    path.mkdir(parents=True)
    tokenizer.save(str(path / "tokenizer.json"))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                                     layer_norm_eps=layer_norm_eps, initializer_range=0.3)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(path)
    return path, model


def test_the_encoder_is_the_bert_and_the_decoder_starts_from_it(tmp_path):
    source, bert = bert_directory(tmp_path / "bert")
    checkpoint = load_checkpoint(warm_start(source, tmp_path / "warm"))
    model, config = checkpoint.model.eval(), checkpoint.model.config
    vocab = json.loads((source / "tokenizer.json").read_text())["model"]["vocab"]
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id, config.decoder_start_token_id) == (
        vocab["[CLS]"], vocab["[SEP]"], vocab["[PAD]"], vocab["[CLS]"])
    ids = torch.randint(5, config.vocab_size, (3, 20))
    mask = torch.ones_like(ids)
    mask[1, 12:], mask[2, 5:] = 0, 0
    with torch.no_grad():
        ours, _ = model.encode(ids, mask)
        theirs = bert(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], rtol=1e-4, atol=1e-4)
    state = model.state_dict()
    bert_state = bert.state_dict()
    for i in range(config.decoder_layers):
        layer = f"model.decoder.layers.{i}"
        assert torch.equal(state[f"{layer}.self_attn.q_proj.weight"],
                           bert_state[f"encoder.layer.{i}.attention.self.query.weight"])
        assert torch.equal(state[f"{layer}.fc2.weight"], bert_state[f"encoder.layer.{i}.output.dense.weight"])
        assert torch.equal(state[f"{layer}.encoder_attn_layer_norm.weight"], torch.ones(config.d_model))
        assert not torch.equal(state[f"{layer}.encoder_attn.q_proj.weight"], state[f"{layer}.self_attn.q_proj.weight"])
    assert torch.equal(state["model.shared.weight"], bert_state["embeddings.word_embeddings.weight"])


def test_the_checkpoint_summarizes_in_the_berts_tokens(tmp_path, capsys):
    from locsum_sdk import Summarizer

    source, _ = bert_directory(tmp_path / "bert", layer_norm_eps=1e-12)
    assert main(["--bert", str(source), "--output", str(tmp_path / "warm")]) == 0
    assert "wrote" in capsys.readouterr().out
    summarizer = Summarizer.from_pretrained(tmp_path / "warm")
    summary = summarizer.summarize(document(random.Random(1), 12), max_length=8, num_beams=2, page_tokens=64)
    cls, sep = summarizer.special.bos, summarizer.special.eos
    assert all(u.token_ids[0] == cls and u.token_ids[-1] == sep for u in summary.units)
    assert 0 < len(summary.token_ids) <= 7


def test_what_is_not_a_bert_is_refused(tmp_path):
    source, _ = bert_directory(tmp_path / "bert")
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    with pytest.raises(BundleError, match="BERT"):
        warm_start(source, tmp_path / "warm")
    (source / "tokenizer.json").unlink()
    with pytest.raises(BundleError, match="tokenizer.json"):
        warm_start(source, tmp_path / "warm")
