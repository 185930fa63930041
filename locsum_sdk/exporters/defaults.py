"""A bundle again with other default options: the same graphs and files, a manifest whose defaults (paging,
limits, decoding) are changed. Needs no torch: a bundle whose checkpoint is gone can still get the decoding its
evaluation chose (`locsum export --bundle`, `train.release --bundle`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from .. import constants as C
from ..bundle import Bundle, write_manifest
from ..errors import ExportError, OptionError
from ..packed import PACKED_SUFFIX
from ..words import WordList
from .staging import staged


def set_defaults(bundle: str | os.PathLike, output: str | os.PathLike, options: dict[str, Any],
                 force: bool = False, common_words: str | os.PathLike | None = None) -> Bundle:
    """Copy the bundle at `bundle` to `output` with `options` (any option by name) over its default options.

    The copy is checked as a whole before it replaces `output` (an error leaves nothing there). Its graphs,
    tokenizer and other files are the source's, byte for byte; `common_words`, a word list (one lowercase word a
    line, as training writes it), becomes its `common_words.txt` for the `keywords` option. A bundle with TensorRT
    engines keeps them only where the change leaves paging and limits alone (the engines' shape profiles were
    built for them)."""
    source = Bundle.load(bundle)
    if common_words is not None:
        WordList.read(common_words)  # a damaged list is refused before any work
    output = Path(output)
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise OptionError(f"options is a {type(options).__name__}; pass a dict of option names and values")
    if output.resolve() == source.path.resolve():
        raise ExportError(f"{output} is the source bundle; write the copy to another directory")
    if output.exists() and not force:
        raise ExportError(f"{output} already exists; pass force=True (--force) to replace it")
    manifest = source.manifest
    changed = manifest.options().replace(**options)
    changed.check_model(manifest.model)
    settings = changed.to_settings()
    if manifest.tensorrt and (settings["units"] != manifest.units or settings["limits"] != manifest.limits):
        raise OptionError(f"{source.path} holds TensorRT engines built for its paging and limits; change only "
                          "decoding options, or build the engines again (export/to_trt.py) after changing them")
    packed = dict(manifest.packed)
    with staged(output) as work:
        for name in manifest.files:
            shutil.copyfile(source.path / name, work / name)
        if common_words is not None:
            if packed.pop(C.COMMON_WORDS_FILE, None):  # the new list replaces the packed one
                (work / (C.COMMON_WORDS_FILE + PACKED_SUFFIX)).unlink()
            shutil.copyfile(common_words, work / C.COMMON_WORDS_FILE)
        elif changed.generation.keywords and C.COMMON_WORDS_FILE not in source.names():
            raise OptionError(f"keywords={changed.generation.keywords} needs a {C.COMMON_WORDS_FILE}, which "
                              f"{source.path} has none of; pass one (--common-words FILE) or set keywords=0")
        write_manifest(work, manifest, **settings, packed=packed)
    return Bundle.load(output)
