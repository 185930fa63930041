"""Shared fixtures: a tokenizer, a tiny random PageSum checkpoint and its exported bundle, made per session."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# The Triton kernels run interpreted (numpy, CPU tensors) in this process, whatever a test module imports first:
# triton decides when a kernel is defined. tests/gpu runs them compiled, in processes of their own.
os.environ.setdefault("TRITON_INTERPRET", "1")

# Property-based tests: a few hundred generated cases per entry point by default, 5,000 in the slow tier.
settings.register_profile("default", max_examples=200, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("slow", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="run the slow tier: 5,000 generated cases per entry point, "
                     "wheel builds")


def pytest_configure(config):
    settings.load_profile("slow" if config.getoption("--slow") else "default")
    share_the_cores()


def share_the_cores() -> None:
    """Under pytest-xdist each worker's models (and the commands its tests start, which inherit the environment)
    run on the worker's share of the cores: with every worker on every core the spinning threads of one took the
    cores from the other (the suite's test times summed to 1,840-2,140 s on 2 cores; with the share, 1,570-1,750 s).
    Set before torch is imported, so its OpenMP pool takes the share too. An explicit $LOCSUM_THREADS or
    $OMP_NUM_THREADS is left as it is."""
    from locsum_sdk.threads import THREADS_ENV, usable_cpus

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        share = str(max(1, usable_cpus() // workers))
        os.environ.setdefault(THREADS_ENV, share)
        os.environ.setdefault("OMP_NUM_THREADS", share)


# The modules of a minute or more, run first: pytest-xdist (README's `-n auto --dist loadfile`) hands each worker
# whole modules in the order collected, so the long ones start early and the workers end together rather than one
# running the last long module alone. A scheduling hint only: a module missing here runs in its place.
FIRST = ("test_docs.py", "test_ray.py", "test_training.py", "test_estimates.py", "test_properties.py",
         "test_kernels.py", "test_llm_sources.py", "test_sources.py", "test_distributed.py", "test_serve.py",
         "test_page.py", "test_batch.py", "test_llama.py", "test_rebuild.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: FIRST.index(item.path.name) if item.path.name in FIRST else len(FIRST))
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow tier: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

WORDS = (
    "the committee budget report meeting project design team market sales quarter remote control battery "
    "user interface button speech recognition cost price plan decision agreed discussed proposed review "
    "data results model system customer product feature evaluation schedule risk delivery network energy "
    "policy government city school students research paper method analysis growth revenue target".split()
)


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 16))]
    return " ".join(words).capitalize() + rng.choice([".", ".", ".", "?", "!"])


def document(rng: random.Random, sentences: int) -> str:
    """Random text with paragraphs and line breaks."""
    paragraphs = []
    while sentences > 0:
        n = min(sentences, rng.randint(2, 6))
        paragraphs.append(" ".join(sentence(rng) for _ in range(n)))
        sentences -= n
    return "\n\n".join(paragraphs)


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory) -> Path:
    from train.tokenizer import save_tokenizer, train_tokenizer

    rng = random.Random(0)
    corpus = [document(rng, 8) for _ in range(200)]
    return save_tokenizer(train_tokenizer(corpus, vocab_size=400), tmp_path_factory.mktemp("tok") / "tokenizer.json")


@pytest.fixture(scope="session")
def tokenizer(tokenizer_file):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_file))


def tiny_config(vocab_size: int, **changes):
    from locsum_sdk.configs.model import BartConfig

    values = dict(
        vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=2, encoder_heads=4, decoder_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, max_positions=128,
    )
    return BartConfig(**{**values, **changes})


def tiny_llama_config(vocab_size: int, **changes):
    """A two-layer Llama backbone config with grouped-query attention (4 query heads share 2 key/value heads)."""
    from locsum_sdk.configs.llama import LlamaConfig

    values = dict(vocab_size=vocab_size, d_model=32, layers=2, heads=4, kv_heads=2, ffn_dim=48, max_positions=128,
                  rope_base=10000.0, bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2)
    return LlamaConfig(**{**values, **changes})


def random_model(build, seed: int = 0, std: float = 0.3):
    """`build()`'s model with seeded random weights large enough that greedy choices are not near-ties, in eval
    mode."""
    import torch

    torch.manual_seed(seed)
    model = build()
    model.reset_parameters(std)
    return model.eval()


def random_pagesum(vocab_size: int, seed: int = 0, std: float = 0.3, backbone: str = "bart"):
    """A tiny PageSum with random weights (`random_model`) on a BART or a Llama backbone."""
    from locsum_sdk.modeling.pagesum import PageSum

    config = tiny_llama_config(vocab_size) if backbone == "llama" else tiny_config(vocab_size)
    return random_model(lambda: PageSum(config), seed, std)


def random_checkpoint(model, directory: Path, tokenizer_file: Path, units: dict) -> Path:
    """`model` saved as our checkpoint with `units` and greedy decoding of at most 16 tokens."""
    from locsum_sdk.modeling.checkpoint import save_checkpoint

    return save_checkpoint(model, directory, tokenizer_file, units=units,
                           generation={"num_beams": 1, "max_length": 16})


def training_rows(count: int = 12) -> list[dict]:
    """`count` small training examples (every other one sharing a document; some with a query)."""
    rng = random.Random(0)
    shared = document(rng, 30)
    return [{"id": f"x-{i}", "documents": [shared if i % 2 else document(rng, rng.randint(5, 40))],
             "query": "What was decided?" if i % 3 == 0 else None, "summary": document(rng, 2), "source": "test"}
            for i in range(count)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """Rows as a JSON Lines data file, as ../shared/data lays them out."""
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def hf_bart_directory(path: Path, vocab_size: int = 400) -> Path:
    """A tiny random HF BART saved with `save_pretrained` (config.json + model.safetensors)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
    )
    transformers.BartForConditionalGeneration(config).save_pretrained(path)
    return path


def check_selection_memory(bundle: Path, text: str, runs, inputs, graph: str) -> None:
    """A selection stage's run is held to the memory limit: with a limit between one run of 4 and one of 8 units,
    unit_batch_size=8 is refused before the run (naming the pass) and unit_batch_size=1 scores every unit within
    it (the call then needs the encoder's and decoder's memory besides)."""
    from locsum_sdk import Summarizer
    from locsum_sdk.errors import MemoryLimitError
    from locsum_sdk.memory import PAGING_BYTES_PER_TOKEN

    wide = Summarizer.from_pretrained(bundle, threads=1, unit_batch_size=8)
    options = wide.options().units
    units = wide.kind.pager(wide.tokenizer, wide.special, options)([text])

    def largest_run(size: int) -> int:
        return max(wide.kind.selection.memory(wide.model, inputs(units[a:b], [], options))
                   for a, b in runs(units, [], options, size))

    assert len(runs(units, [], options, 1)) >= 8 and largest_run(1) * 4 < largest_run(8)
    limit = PAGING_BYTES_PER_TOKEN * sum(len(u.token_ids) for u in units) + largest_run(4)
    with pytest.raises(MemoryLimitError, match=rf"the {graph} pass over \d+ units needs about .* over the memory "
                                               r"limit .* smaller unit_batch_size \(now 8\)"):
        wide.summarize(text, memory_limit=limit, max_length=6)
    narrow = Summarizer.from_pretrained(bundle, threads=1, unit_batch_size=1)
    assert narrow.unit_scores(units, None, options, memory_limit=limit).shape == (len(units),)
    assert narrow.summarize(text, max_length=6).text is not None


def check_whole_input_features(bundle: Path, checkpoint: Path, text: str, query: str) -> None:
    """A selection stage with inputs computed over the whole item (`Selection.features`) scores every unit the same
    whatever the runs (unit_batch_size 1, 8; torch at 2) and backend, and both backends summarize token for token."""
    from locsum_sdk import Summarizer

    scores = {}
    for name, summarizer in [("ort-1", Summarizer.from_pretrained(bundle, threads=1, unit_batch_size=1)),
                             ("ort-8", Summarizer.from_pretrained(bundle, threads=1, unit_batch_size=8)),
                             ("torch", Summarizer.from_pretrained(checkpoint, backend="torch", unit_batch_size=2))]:
        options = summarizer.options().units
        pager = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options)
        units = pager.pages([text], pager.query_ids(query))
        assert summarizer.kind.selection.features(summarizer.model, units, pager.query_ids(query))
        scores[name] = summarizer.unit_scores(units, query, options)
    assert len(scores["torch"]) >= 8  # several runs at unit_batch_size 1 and 2
    np.testing.assert_allclose(scores["ort-1"], scores["ort-8"], atol=1e-6)
    np.testing.assert_allclose(scores["ort-1"], scores["torch"], atol=1e-5)
    ort = Summarizer.from_pretrained(bundle, threads=1).summarize(text, query=query, num_beams=2, max_length=8)
    ref = Summarizer.from_pretrained(checkpoint, backend="torch").summarize(text, query=query, num_beams=2,
                                                                           max_length=8)
    assert ort.token_ids == ref.token_ids and [u.start for u in ort.units] == [u.start for u in ref.units]


def unpacked_copy(bundle: Path, target: Path) -> Path:
    """`bundle` copied to `target` with every file it reads unpacked (a packed bundle as a plain export writes it),
    its card beside them."""
    import shutil

    from locsum_sdk import constants as C
    from locsum_sdk.bundle import Bundle, write_manifest

    source = Bundle.load(bundle)
    target.mkdir(parents=True)
    for name in source.names():
        shutil.copyfile(source.file(name), target / name)
    write_manifest(target, source.manifest, packed={})
    for path in bundle.iterdir():
        if path.is_file() and path.name not in source.manifest.files and path.name != C.MANIFEST_FILE:
            shutil.copyfile(path, target / path.name)
    return target


def run_onnx_function(function, domain: str, opset: int, inputs: dict, outputs: dict[str, int]) -> list:
    """One node calling the onnxscript `function` (an ONNX local function of `domain`), checked with
    onnx.checker and run on ONNX Runtime on `inputs` (name -> numpy array); returns the float `outputs`
    (name -> rank)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import checker, helper

    def value(name, dtype, rank):
        return helper.make_tensor_value_info(name, dtype, [f"{name}_{i}" for i in range(rank)])

    node = helper.make_node(function.name, list(inputs), list(outputs), domain=domain)
    graph = helper.make_graph(
        [node], function.name,
        [value(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.ndim) for n, a in inputs.items()],
        [value(n, helper.np_dtype_to_tensor_dtype(np.dtype(np.float32)), rank) for n, rank in outputs.items()],
    )
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(domain, 1)]
    proto = helper.make_model(graph, opset_imports=opsets, functions=[function.to_function_proto()])
    proto.ir_version = 10  # the newest IR version ONNX Runtime 1.31 reads
    checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(list(outputs), inputs)


TINY_UNITS = {"policy": "spatial", "max_pages": 64, "page_tokens": 64}  # max_pages: a training-only cap
TINY_GENERATION = {"num_beams": 1, "max_length": 24}


@pytest.fixture(scope="session")
def checkpoint_dir(tmp_path_factory, tokenizer, tokenizer_file) -> Path:
    from locsum_sdk.modeling.checkpoint import save_checkpoint

    model = random_pagesum(tokenizer.get_vocab_size())
    return save_checkpoint(
        model, tmp_path_factory.mktemp("ckpt"), tokenizer_file, units=TINY_UNITS, generation=TINY_GENERATION
    )


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory, checkpoint_dir) -> Path:
    from locsum_sdk.exporters.onnx import export_onnx

    output = tmp_path_factory.mktemp("bundles") / "tiny"
    export_onnx(checkpoint_dir, output)
    return output


LLAMA_FRAME = {"unit_head": (5, 6), "unit_tail": (7, 8, 9), "query_head": (10,), "query_tail": (11,)}


@pytest.fixture(scope="session")
def llama_checkpoint_dir(tmp_path_factory, tokenizer, tokenizer_file) -> Path:
    """A tiny PageSum on a Llama backbone (random weights), its units in a prompt: `LLAMA_FRAME` ids around the text
    and the query after it."""
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.pagesum import PageSum

    config = tiny_llama_config(tokenizer.get_vocab_size(), **LLAMA_FRAME)
    model = random_model(lambda: PageSum(config))
    return save_checkpoint(model, tmp_path_factory.mktemp("llama_ckpt"), tokenizer_file, units=TINY_UNITS,
                           generation=TINY_GENERATION)


@pytest.fixture(scope="session")
def llama_bundle_dir(tmp_path_factory, llama_checkpoint_dir) -> Path:
    from locsum_sdk.exporters.onnx import export_onnx

    return export_onnx(llama_checkpoint_dir, tmp_path_factory.mktemp("bundles") / "llama").path


@pytest.fixture(scope="session")
def llama_hierencdec_bundle_dir(tmp_path_factory, llama_checkpoint_dir) -> Path:
    """The tiny Llama PageSum exported as hierencdec: its backbone reads each document alone and one summary reads
    them all (`modeling.hierencdec_llama`); the page confidence layer is left out."""
    from locsum_sdk.exporters.onnx import export_onnx

    output = tmp_path_factory.mktemp("bundles") / "llama-hierencdec"
    return export_onnx(llama_checkpoint_dir, output, kind="hierencdec",
                       options={"policy": "document", "page_tokens": 100}).path


@pytest.fixture(scope="session")
def hierencdec_bundle_dir(tmp_path_factory, checkpoint_dir) -> Path:
    """The tiny PageSum checkpoint's BART weights exported as hierencdec (`locsum export --kind hierencdec`)."""
    from locsum_sdk.cli import main

    output = tmp_path_factory.mktemp("bundles") / "tiny-hierencdec"
    assert main(["export", "--kind", "hierencdec", "--checkpoint", str(checkpoint_dir), "--output", str(output)]) == 0
    return output


@pytest.fixture(scope="session")
def dyle_bundle_dir(tmp_path_factory, checkpoint_dir) -> Path:
    """The tiny PageSum checkpoint's BART weights exported as dyle (the extractor starts from its encoder)."""
    from locsum_sdk.exporters.onnx import export_onnx

    output = tmp_path_factory.mktemp("bundles") / "tiny-dyle"
    export_onnx(checkpoint_dir, output, kind="dyle", options={"snippet_tokens": 48})
    return output


@pytest.fixture(scope="session")
def hiersumm_bundle_dir(tmp_path_factory, checkpoint_dir) -> Path:
    """The tiny PageSum checkpoint as a Hierarchical Transformer (its token embeddings carry over)."""
    from locsum_sdk.exporters.onnx import export_onnx

    output = tmp_path_factory.mktemp("bundles") / "tiny-hiersumm"
    export_onnx(checkpoint_dir, output, kind="hiersumm", options={"paragraph_tokens": 48})
    return output


@pytest.fixture
def short_qmsum(tmp_path, monkeypatch) -> Path:
    """A data folder for `train.release` holding QMSum test's first 3 meetings of ../shared/data, each cut to its
    first lines up to 4,000 characters: the real format and text at a tenth of the cost of whole meetings."""
    import json

    from train import release

    folder = tmp_path / "short-data"
    (folder / "qmsum").mkdir(parents=True)
    rows = []
    with open(SHARED_DATA / "qmsum" / "test.jsonl", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            cut = ""
            for text_line in row["documents"][0].splitlines(keepends=True):
                if len(cut) + len(text_line) > 4000:
                    break
                cut += text_line
            rows.append(json.dumps({**row, "documents": [cut]}))
            if len(rows) == 3:
                break
    (folder / "qmsum" / "test.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    monkeypatch.setattr(release, "DATA", folder)
    return folder


def json_values(text_size: int = 8, leaves: int = 6):
    """Any JSON value: scalars (NaN and infinities among the floats), and lists and objects of them."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(), st.text(max_size=text_size))
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                        max_leaves=leaves)


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# decoding options under which a tiny model's request on a long input takes long enough to be caught mid-way:
# 4 beams over all 128 positions of the tiny config
SLOW_OPTIONS = {"max_length": 128, "min_length": 128, "num_beams": 4, "page_tokens": 32, "no_repeat_ngram_size": 0}
