"""The kind registry: one declaration of each kind's graphs that the exporter writes, the manifest records and the
backends check."""

import dataclasses
import json
import shutil

import pytest
from conftest import tiny_config

from locsum_sdk import Summarizer, kinds
from locsum_sdk import constants as C
from locsum_sdk.bundle import Bundle
from locsum_sdk.errors import BundleError, BundleIntegrityError, BundleVersionError, OptionError
from locsum_sdk.units import PagingOptions


def test_pagesum_is_registered_with_its_unit_options_and_graphs():
    kind = kinds.get("pagesum")
    assert kind.unit_options is PagingOptions and kind.revision >= 1 and "page" in kind.units
    io = kind.graphs(tiny_config(50, decoder_layers=3).to_dict())
    assert set(io) == {"encoder", "decoder"}
    assert io["decoder"].input_names[:5] == [C.INPUT_IDS, C.UNIT_MASK, C.ENCODER_ATTENTION_MASK, C.POSITION,
                                             C.CACHE_SLOTS]
    assert len(io["encoder"].outputs) == 1 + 2 * 3 and io["decoder"].outputs[1].name == C.UNIT_WEIGHTS
    assert all(t.dtype in kinds.DTYPES for graph in io.values() for t in graph.inputs + graph.outputs)


def test_unknown_kinds_are_named_with_the_known_ones():
    known = r"\['dyle', 'hierencdec', 'hiersumm', 'pagesum'\]"
    with pytest.raises(OptionError, match=r"'summit' is not known; this locsum runs " + known):
        kinds.get("summit")
    with pytest.raises(ValueError, match="twice"):
        kinds.register(kinds.get("pagesum"))


@pytest.fixture
def bundle_copy(bundle_dir, tmp_path):
    return shutil.copytree(bundle_dir, tmp_path / "bundle")


def test_the_manifest_records_the_kind_revision_and_its_declared_graphs(bundle_copy):
    manifest = Bundle.load(bundle_copy).manifest
    assert manifest.kind_revision == kinds.get("pagesum").revision
    path = bundle_copy / C.MANIFEST_FILE
    values = json.loads(path.read_text())
    path.write_text(json.dumps({**values, "kind_revision": 99}))
    with pytest.raises(BundleVersionError, match="revision 99"):
        Bundle.load(bundle_copy)
    values["graphs"]["decoder"]["inputs"] = values["graphs"]["decoder"]["inputs"][::-1]
    path.write_text(json.dumps(values))
    with pytest.raises(BundleIntegrityError, match="graphs.decoder does not declare"):
        Bundle.load(bundle_copy)


def test_the_backend_checks_graph_dtypes_against_the_declaration(bundle_dir, monkeypatch):
    kind = kinds.get("pagesum")

    def wrong_dtype(model):
        io = kind.graphs(model)
        first = dataclasses.replace(io["encoder"].inputs[0], dtype="float32")
        return {**io, "encoder": dataclasses.replace(io["encoder"], inputs=(first, *io["encoder"].inputs[1:]))}

    monkeypatch.setitem(kinds.REGISTRY, "pagesum", dataclasses.replace(kind, graphs=wrong_dtype))
    with pytest.raises(BundleError, match="takes and returns"):
        Summarizer.from_pretrained(bundle_dir)


@dataclasses.dataclass(frozen=True)
class SnippetOptions:
    """Unit options of a stand-in kind, for the cross-kind check."""

    UNIT_TOKENS = "snippet_tokens"

    top_k: int = 25
    snippet_tokens: int = 64


def test_another_kinds_options_are_refused_by_name(bundle_dir, monkeypatch):
    other = dataclasses.replace(kinds.get("pagesum"), name="snippets", unit_options=SnippetOptions)
    monkeypatch.setitem(kinds.REGISTRY, "snippets", other)
    summarizer = Summarizer.from_pretrained(bundle_dir, threads=1)
    with pytest.raises(OptionError, match=r"top_k \(taken by dyle, snippets\) belong to other kinds"):
        summarizer.summarize("The board met on Monday.", top_k=5)
    with pytest.raises(OptionError, match="unknown option"):
        summarizer.summarize("The board met on Monday.", temperature=0.5)


def test_the_torch_side_registers_under_the_same_name():
    from locsum_sdk.modeling import registry

    assert set(registry.MODEL_KINDS) == set(kinds.names())
    entry = registry.model_kind("pagesum")
    assert entry.functions == {"decoder": "PageCombine"} and "hf-bart" in entry.formats
    with pytest.raises(OptionError, match="no model here"):
        registry.model_kind("summit")


def test_a_foreign_format_a_kind_does_not_load_is_refused(tmp_path):
    from locsum_sdk.modeling import registry

    with pytest.raises(BundleError, match="cannot be loaded as pagesum"):
        registry.check_formats("pagesum", "hiersumm-research")
