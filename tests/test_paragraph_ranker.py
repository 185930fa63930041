"""The learned paragraph ranker: its formula, padding that changes nothing, training on ROUGE-2 recall targets,
and ONNX Runtime equal to torch (LSTMs exported as ONNX LSTM)."""

import warnings

import numpy as np
import pytest
import torch

from locsum_sdk.modeling.paragraph_ranker import ParagraphRanker, RankerConfig, masked_max, ranker_loss


def ranker(seed=0, tfidf=False):
    torch.manual_seed(seed)
    return ParagraphRanker(RankerConfig(vocab_size=40, embed_dim=12, hidden=10, tfidf=tfidf)).eval()


def inputs(seed=1, n=4, title_tokens=5, tokens=9):
    g = torch.Generator().manual_seed(seed)
    title = torch.randint(3, 40, (n, title_tokens), generator=g)
    title_mask = torch.ones_like(title)
    title_mask[1, 3:] = 0
    title_mask[3] = 0  # no title
    paragraph = torch.randint(3, 40, (n, tokens), generator=g)
    paragraph_mask = torch.ones_like(paragraph)
    paragraph_mask[0, 6:] = 0
    return title, title_mask, paragraph, paragraph_mask


def test_the_score_follows_the_formula():
    model = ranker()
    title, title_mask, paragraph, paragraph_mask = inputs()
    with torch.no_grad():
        scores = model(title, title_mask, paragraph, paragraph_mask)
        i = 1
        t, _ = model.title_lstm(model.embed(title[i : i + 1, :3]))
        u = t[0].amax(0)
        p, _ = model.paragraph_lstm(model.embed(paragraph[i : i + 1]))
        h = torch.tanh(model.mix(torch.cat([p[0], u.expand(p.shape[1], -1)], -1))).amax(0)
        assert torch.allclose(scores[i], torch.sigmoid(model.score(h))[0], atol=1e-6)
    assert torch.all((scores > 0) & (scores < 1))
    assert torch.all(masked_max(torch.ones(1, 3, 2), torch.zeros(1, 3, dtype=torch.bool)) == 0)


def test_the_tfidf_feature_enters_the_mix_and_the_score():
    model = ranker(tfidf=True)
    with torch.no_grad():
        model.tfidf_weight.fill_(0.7)
    title, title_mask, paragraph, paragraph_mask = inputs()
    feature = torch.tensor([1.5, -0.5, 0.0, -1.0])
    with torch.no_grad():
        logits = model.logits(title, title_mask, paragraph, paragraph_mask, feature)
        i = 0
        t, _ = model.title_lstm(model.embed(title[i : i + 1]))
        p, _ = model.paragraph_lstm(model.embed(paragraph[i : i + 1, :6]))
        column = torch.full((p.shape[1], 1), 1.5)
        h = torch.tanh(model.mix(torch.cat([p[0], t[0].amax(0).expand(p.shape[1], -1), column], -1))).amax(0)
        assert torch.allclose(logits[i], model.score(h)[0] + 0.7 * 1.5, atol=1e-6)
    with pytest.raises(ValueError, match="reads a tf-idf feature"):
        model(title, title_mask, paragraph, paragraph_mask)
    with pytest.raises(ValueError, match="does not read a tf-idf feature"):
        ranker()(title, title_mask, paragraph, paragraph_mask, feature)


def test_padding_changes_no_score():
    model = ranker()
    title, title_mask, paragraph, paragraph_mask = inputs()
    pad = lambda x, n: torch.cat([x, torch.ones(x.shape[0], n, dtype=x.dtype)], 1)  # noqa: E731  <pad> = 1
    zeros = lambda x, n: torch.cat([x, torch.zeros(x.shape[0], n, dtype=x.dtype)], 1)  # noqa: E731
    with torch.no_grad():
        scores = model(title, title_mask, paragraph, paragraph_mask)
        padded = model(pad(title, 4), zeros(title_mask, 4), pad(paragraph, 7), zeros(paragraph_mask, 7))
    assert torch.allclose(scores, padded, atol=1e-6)


@pytest.mark.parametrize("listwise", [0.0, 1.0])
def test_it_learns_to_rank_by_rouge_recall(listwise):
    model = ranker().train()
    title, title_mask, paragraph, paragraph_mask = inputs(n=8, seed=3)
    targets = torch.linspace(0.05, 0.6, 8)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    first = None
    for _ in range(60):
        loss = ranker_loss(model.logits(title, title_mask, paragraph, paragraph_mask), targets, listwise)
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < (first / 10 if not listwise else first)
    with torch.no_grad():
        scores = model(title, title_mask, paragraph, paragraph_mask)
    assert torch.equal(scores.argsort(), targets.argsort())


def test_the_loss_is_the_regression_plus_the_listwise_cross_entropy():
    logits, targets = torch.tensor([2.0, -1.0, 0.5]), torch.tensor([0.3, 0.0, 0.1])
    regression = torch.mean((torch.sigmoid(logits) - targets) ** 2)
    shares = targets / targets.sum()
    cross_entropy = -(shares * (logits - torch.logsumexp(logits, 0))).sum()
    assert torch.allclose(ranker_loss(logits, targets, 0.0), regression)
    assert torch.allclose(ranker_loss(logits, targets, 0.5), regression + 0.5 * cross_entropy)
    assert torch.allclose(ranker_loss(logits, torch.zeros(3), 1.0), torch.mean(torch.sigmoid(logits) ** 2))


def test_the_listwise_gradient_does_not_fade_when_the_sigmoid_saturates():
    logits = torch.tensor([-12.0, -12.5, -13.0], requires_grad=True)
    targets = torch.tensor([0.0, 0.0, 0.05])
    ranker_loss(logits, targets, 0.0).backward()
    regression = logits.grad.abs().max().item()
    logits.grad = None
    ranker_loss(logits, targets, 1.0).backward()
    assert regression < 1e-6 and logits.grad[2].item() < -0.1


@pytest.mark.parametrize("tfidf", [False, True])
def test_onnxruntime_scores_equal_torch(tmp_path, tfidf):
    ort = pytest.importorskip("onnxruntime")
    model = ranker(tfidf=tfidf)

    def feature(n, seed):
        return (torch.randn(n, generator=torch.Generator().manual_seed(seed)),) if tfidf else ()

    example = inputs() + feature(4, 0)
    names = ["title_ids", "title_mask", "paragraph_ids", "paragraph_mask"] + (["tfidf"] if tfidf else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, str(tmp_path / "ranker.onnx"), input_names=names, output_names=["scores"],
                          dynamic_axes={"title_ids": {0: "n", 1: "tq"}, "title_mask": {0: "n", 1: "tq"},
                                        "paragraph_ids": {0: "n", 1: "t"}, "paragraph_mask": {0: "n", 1: "t"},
                                        "tfidf": {0: "n"}, "scores": {0: "n"}}, opset_version=17, dynamo=False)
    session = ort.InferenceSession(str(tmp_path / "ranker.onnx"), providers=["CPUExecutionProvider"])
    other = inputs(seed=7, n=6, title_tokens=8, tokens=13) + feature(6, 1)  # other sizes than the traced ones
    got = session.run(None, {name: t.numpy() for name, t in zip(names, other)})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, model(*other).numpy(), atol=1e-5)
