"""The memory estimate holds for every kind and input shape: each generated call runs in a child process with the
shipped bundle of its kind, and its measured peak (above the resident set before the call, the runtime warmed up)
must be within the estimate it was checked against, and the estimate within 2.5 times the peak.

Tolerance: measured <= estimate + SLACK and estimate <= 2.5 x max(measured, FLOOR). SLACK (2 MiB) is the allocator's
and the thread pools' own movement, which no estimate of the call's tensors describes and which depends on the
environment, not on the call: glibc grows a heap in steps of 128 KiB and more and gives each thread that allocates an
arena of its own, so the same three-word call peaked at 594 kB in a fresh virtual environment and at 1.0-1.1 MB,
exactly one 512 KiB heap growth more, in one that had imported a few more packages. Below FLOOR (8 MB) the peak is at
the scale of those movements, and an estimate of a few MB over it protects nothing less. The
estimate adds the selection stage to the decoding step, which do not peak together: the copying DYLE (25 snippets,
4 tokens) measured 24.5 MB against an estimate of 51 MB, 22 MB of it the extractor's. The
wide grid, up to 5,000 documents, is `benchmarks/test_estimates.py`.
"""

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locsum_sdk.memory_probe import Case, measure_case_in_fresh_process

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = {"pagesum": ROOT / "engines" / "pagesum", **{kind: ROOT / "engines" / kind
                                                         for kind in ("dyle", "hierencdec", "hiersumm")}}
FLOOR = 8 * 2**20
SLACK = 2 * 2**20  # the allocator's and the thread pools' own movement (see the module docstring)
CASES_PER_KIND = 4  # each runs in its own process (1-10 s); the benchmark runs the wide grid
WORDS = [3, 12, 60, 400, 3000]  # a few words (a ticket) to a long document cut into many pages


def check(measured) -> None:
    shown = f"{measured.case}: measured {measured.measured / 2**20:.1f} MB, estimate {measured.described}"
    assert measured.measured <= measured.estimate + SLACK, f"the peak is over the estimate: {shown}"
    assert measured.estimate <= 2.5 * max(measured.measured, FLOOR), f"the estimate is over 2.5x the peak: {shown}"


@st.composite
def cases(draw, kind: str, most_documents: int = 600) -> Case:
    inputs = draw(st.integers(1, 2))
    documents = []
    for _ in range(inputs):
        count = draw(st.sampled_from([n for n in (1, 2, 5, 20, 120, 600) if n <= most_documents]))
        words = draw(st.sampled_from(WORDS if count <= 5 else WORDS[:3]))
        documents.append([words] * count)
    return Case(bundle=str(BUNDLES[kind]), documents=documents, query_words=draw(st.sampled_from([0, 8])),
                num_beams=draw(st.integers(1, 4)), max_length=draw(st.sampled_from([4, 16, 40])),
                unit_batch_size=draw(st.sampled_from([1, 4, 8])), seed=draw(st.integers(0, 9)))


@pytest.mark.parametrize("kind", sorted(BUNDLES))
def test_the_estimate_holds_over_generated_shapes(kind):
    @settings(max_examples=CASES_PER_KIND)
    @given(cases(kind))
    def holds(case):
        check(measure_case_in_fresh_process(case))

    holds()


@pytest.fixture(scope="module")
def llama_bundle(tmp_path_factory, tokenizer, tokenizer_file):
    """A PageSum on a Llama backbone large enough that a long input's peak is well above FLOOR (random weights), of
    a user's LLM's shapes rather than SmolLM2's: heads wider than d_model / heads (8 x 32 against 128), query/key/value
    biases and an LM head of its own."""
    from conftest import random_model, tiny_llama_config

    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.pagesum import PageSum

    config = tiny_llama_config(tokenizer.get_vocab_size(), d_model=128, layers=4, heads=8, kv_heads=2, ffn_dim=384,
                               max_positions=1024, head_size=32, attention_bias=True, tie_embeddings=False)
    model = random_model(lambda: PageSum(config), std=0.05)
    checkpoint = save_checkpoint(model, tmp_path_factory.mktemp("llama_ckpt"), tokenizer_file,
                                 units={"policy": "spatial", "page_tokens": 256}, generation={"max_length": 40})
    return export_onnx(checkpoint, tmp_path_factory.mktemp("bundles") / "llama").path


def test_the_estimate_holds_for_a_llama_backbone(llama_bundle):
    """The same generated shapes on a Llama-backed PageSum, up to 120 documents an input (600 of 60 words took 40 s
    of this 8x wider model; the shipped PageSum takes them): grouped-query caches of every layer per page, each
    unit's prefix keys/values, the continued summary's positions."""
    @settings(max_examples=CASES_PER_KIND)
    @given(cases("pagesum", most_documents=120))
    def holds(case):
        check(measure_case_in_fresh_process(dataclasses.replace(case, bundle=str(llama_bundle))))

    holds()


@pytest.fixture(scope="module")
def llama_dyle_bundle(tmp_path_factory, tokenizer, tokenizer_file):
    """A DYLE on a Llama backbone with adapters (and a BERT extractor reading its own tokenizer), int8, random
    weights."""
    import json
    import random
    import shutil

    from conftest import LLAMA_FRAME, document, random_model, tiny_llama_config
    from test_dyle_training import bert_directory

    from locsum_sdk.configs.dyle import ExtractorConfig, LlamaDyleConfig
    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.dyle import Dyle

    rng = random.Random(0)
    bert = bert_directory(tmp_path_factory.mktemp("minilm") / "bert", [document(rng, 8) for _ in range(50)])
    vocab = json.loads((bert / "tokenizer.json").read_text())["model"]["vocab"]
    extractor = ExtractorConfig.from_hf_bert(json.loads((bert / "config.json").read_text()), vocab["[CLS]"],
                                             vocab["[SEP]"])
    config = tiny_llama_config(tokenizer.get_vocab_size(), d_model=128, layers=4, heads=8, kv_heads=2, ffn_dim=384,
                               max_positions=512, lora_rank=4, lora_alpha=8.0, **LLAMA_FRAME)
    model = random_model(lambda: Dyle(LlamaDyleConfig(**config.__dict__, extractor=extractor)), std=0.05)
    checkpoint = save_checkpoint(model, tmp_path_factory.mktemp("llama_dyle"), tokenizer_file,
                                 units={"policy": "auto", "snippet_tokens": 64, "top_k": 6, "chunk_tokens": 96},
                                 generation={"max_length": 40})
    shutil.copyfile(bert / "tokenizer.json", checkpoint / "extractor_tokenizer.json")
    return export_onnx(checkpoint, tmp_path_factory.mktemp("bundles") / "llama-dyle", quantize="int8").path


def test_the_estimate_holds_for_a_llama_dyle_with_adapters(llama_dyle_bundle):
    """DYLE on the Llama backbone: the extractor's chunks beside the selected snippets' prefix caches, every
    projection with its low-rank adapter."""
    @settings(max_examples=CASES_PER_KIND)
    @given(cases("dyle"))
    def holds(case):
        check(measure_case_in_fresh_process(dataclasses.replace(case, bundle=str(llama_dyle_bundle))))

    holds()


@pytest.fixture(scope="module")
def llama_hierencdec_bundle(tmp_path_factory, tokenizer, tokenizer_file):
    """A HierEncDec on a Llama backbone (random weights), each document a prompt read alone."""
    from conftest import LLAMA_FRAME, random_model, tiny_llama_config

    from locsum_sdk.exporters.onnx import export_onnx
    from locsum_sdk.modeling.checkpoint import save_checkpoint
    from locsum_sdk.modeling.hierencdec_llama import LlamaHierEncDec

    config = tiny_llama_config(tokenizer.get_vocab_size(), d_model=128, layers=4, heads=8, kv_heads=2, ffn_dim=384,
                               max_positions=512, **LLAMA_FRAME)
    model = random_model(lambda: LlamaHierEncDec(config), std=0.05)
    checkpoint = save_checkpoint(model, tmp_path_factory.mktemp("llama_hierencdec"), tokenizer_file,
                                 units={"policy": "document", "page_tokens": 256}, generation={"max_length": 40})
    return export_onnx(checkpoint, tmp_path_factory.mktemp("bundles") / "llama-hierencdec").path


def test_the_estimate_holds_for_a_llama_hierencdec(llama_hierencdec_bundle):
    """HierEncDec on the Llama backbone: every document's prefix keys/values, and one summary per item whose
    queries read every document at every layer."""
    @settings(max_examples=CASES_PER_KIND)
    @given(cases("hierencdec"))
    def holds(case):
        check(measure_case_in_fresh_process(dataclasses.replace(case, bundle=str(llama_hierencdec_bundle))))

    holds()


@pytest.mark.parametrize("documents", [2000, 5000])
def test_hierencdec_with_thousands_of_short_documents_is_within_its_estimate(documents):
    """The input shape HierEncDec exists for: a folder of short reviews or tickets, one item."""
    check(measure_case_in_fresh_process(Case(bundle=str(BUNDLES["hierencdec"]), documents=[[12] * documents])))


def test_hierencdec_with_thousands_of_documents_is_refused_below_its_estimate():
    """Refused before anything is encoded, with the itemized estimate, when memory_limit is below it."""
    from locsum_sdk import Summarizer
    from locsum_sdk.errors import MemoryLimitError

    summarizer = Summarizer.from_pretrained(BUNDLES["hierencdec"], threads=1, verify=False)
    documents = [f"Ticket {i}: the printer on floor {i % 7} was fixed." for i in range(2000)]
    options = summarizer.options(max_length=8, min_length=0, num_beams=1)
    units = summarizer.kind.pager(summarizer.tokenizer, summarizer.special, options.units)(documents)
    needed = summarizer.estimate_memory([units], options.generation).total
    with pytest.raises(MemoryLimitError, match=r"2000 page.* needs about .*encoder .* over the memory limit"):
        summarizer.summarize(documents, options=options, memory_limit=needed - 1)
