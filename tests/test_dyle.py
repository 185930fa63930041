"""DYLE's torch modules: the BERT extractor encoder equals HF BertModel; the extractor reads states at separators;
the generator marginalizes over snippets with padding snippets weighing nothing; configs round-trip."""

import pytest
import torch

from locsum_sdk.errors import BundleError
from locsum_sdk.modeling.bart import attention_bias
from locsum_sdk.modeling.bert import BertEncoder, from_hf_bert_names
from locsum_sdk.modeling.dyle import Dyle, Extractor
from locsum_sdk.modeling.dyle_config import DyleConfig, ExtractorConfig
from locsum_sdk.ops import snippet_marginalize

transformers = pytest.importorskip("transformers")


def tiny_dyle(seed: int = 0, **extractor) -> Dyle:
    config = DyleConfig(vocab_size=60, d_model=32, encoder_layers=2, decoder_layers=2, encoder_heads=4,
                        decoder_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_positions=64,
                        extractor=ExtractorConfig(**extractor) if extractor else None)
    torch.manual_seed(seed)
    model = Dyle(config)
    model.reset_parameters(0.3)
    return model.eval()


def test_the_bert_encoder_equals_hf_bert():
    hf_config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    hf = transformers.BertModel(hf_config).eval()
    config = ExtractorConfig.from_hf_bert({**hf_config.to_dict(), "model_type": "bert"}, start=1, separator=2)
    ours = BertEncoder(config).eval()
    ours.load_state_dict(from_hf_bert_names({f"bert.{k}": v for k, v in hf.state_dict().items()}))
    ids = torch.randint(0, 100, (3, 20))
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, 12:] = 0
    want = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.allclose(ours(ids, mask)[mask.bool()], want[mask.bool()], atol=1e-5)
    with pytest.raises(BundleError, match="not a weight of a BERT encoder"):
        from_hf_bert_names({"cls.predictions.bias": torch.zeros(1)})
    with pytest.raises(BundleError, match="HF BERT config"):
        ExtractorConfig.from_hf_bert({"model_type": "roberta"}, 0, 2)


def test_the_extractor_scores_the_state_at_each_separator():
    extractor = tiny_dyle().extractor
    ids = torch.randint(3, 60, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    separators = torch.tensor([3, 7, 12 + 4, 12 + 11])
    scores = extractor(ids, mask, separators)
    states = extractor.encoder(ids, mask).reshape(24, -1)
    assert torch.allclose(scores, extractor.classifier(states[separators]).squeeze(-1))
    bert = tiny_dyle(architecture="bert", vocab_size=50, d_model=16, layers=1, heads=2, ffn_dim=32,
                     type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0).extractor
    assert isinstance(bert.encoder, BertEncoder) and bert(ids % 50, mask, separators).shape == (4,)


def test_the_generator_marginalizes_over_snippets_and_ignores_padding_snippets():
    model = tiny_dyle()
    ids = torch.randint(3, 60, (2, 3, 10))
    mask = torch.ones(2, 3, 10, dtype=torch.long)
    units = torch.tensor([[True, True, True], [True, True, False]])
    target = torch.randint(3, 60, (2, 5))
    with torch.no_grad():
        log_probs, weights = model(ids, mask, units, target)
        alone, alone_weights = model(ids[1:, :2], mask[1:, :2], units[1:, :2], target[1:])
    assert log_probs.shape == (2, 5, 60) and weights.shape == (2, 3, 5)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2, 5), atol=1e-5)
    assert torch.all(weights[1, 2] == 0) and torch.allclose(weights.sum(1), torch.ones(2, 5), atol=1e-6)
    assert torch.allclose(log_probs[1], alone[0], atol=1e-5) and torch.allclose(weights[1, :2], alone_weights[0])
    with torch.no_grad():  # by hand: the mixture of each snippet's own distribution under the dynamic weights
        memory = model.model.encoder(ids[0], mask[0])
        hidden = model.model.decoder(target[:1], model.model.cross_kv(memory), attention_bias(mask[0], memory.dtype),
                                     units=3)  # (3, T, D)
        each = torch.log_softmax(model.model.lm_logits(hidden), -1)  # (3, T, V)
        dynamic = torch.softmax(model.dynamic_mlp(hidden).squeeze(-1), 0)  # (3, T)
        mixture = torch.log((dynamic[..., None] * each.exp()).sum(0))
    assert torch.allclose(log_probs[0], mixture, atol=1e-5)
    assert snippet_marginalize.TORCH_NAME == "locsum::snippet_marginalize"


def test_configs_round_trip_and_the_extractor_defaults_to_the_generator_shape():
    model = tiny_dyle()
    config = model.config
    assert DyleConfig.from_dict(config.to_dict()) == config
    assert config.extractor.d_model == 32 and config.extractor.vocab_size == 60 and config.extractor.layers == 2
    with pytest.raises(BundleError, match="extractor.architecture"):
        DyleConfig.from_dict({**config.to_dict(), "extractor": {**config.to_dict()["extractor"], "architecture": "x"}})
    with pytest.raises(BundleError, match="unknown"):
        DyleConfig.from_dict({**config.to_dict(), "extractor": {"colour": 1}})
    assert Extractor(config.extractor).config == config.extractor
