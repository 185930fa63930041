"""An HF model directory of a Llama-family LLM: `config.json` (its `model_type` names the family),
`model.safetensors` or shards listed by `model.safetensors.index.json`, `tokenizer.json`, the chat template
(`chat_template.jinja`, or `chat_template` in `tokenizer_config.json`) and `generation_config.json` where present.

Only safetensors weights are read (a `pytorch_model.bin` would have to be unpickled: convert it first). Tensors are
read one at a time; a tensor the family's block has no place for is refused by name when the weights are loaded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BundleError, BundleNotFoundError
from .families import family
from .safetensors_file import SafetensorsFile
from .source import LLMSource, Origin

CONFIG, WEIGHTS, INDEX, TOKENIZER = "config.json", "model.safetensors", "model.safetensors.index.json", "tokenizer.json"
TOKENIZER_CONFIG, TEMPLATE, GENERATION = "tokenizer_config.json", "chat_template.jinja", "generation_config.json"


def is_llm_directory(path: Path) -> bool:
    """Whether `path` is a directory whose config.json names a model type of a registered family."""
    from .families import FAMILIES

    config = _json(path / CONFIG) if (path / CONFIG).is_file() else None
    return isinstance(config, dict) and config.get("model_type") in FAMILIES


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BundleError(f"{path} is not readable JSON ({error}); restore it") from None


def _object(path: Path) -> dict[str, Any]:
    value = _json(path)
    if not isinstance(value, dict):
        raise BundleError(f"{path} holds a JSON {type(value).__name__}, not an object; restore it")
    return value


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of the directory: the one file, or every shard its index lists (each checked)."""
    if (directory / INDEX).is_file():
        index = _object(directory / INDEX).get("weight_map")
        if not isinstance(index, dict) or not index or not all(isinstance(v, str) for v in index.values()):
            raise BundleError(f"{directory / INDEX} has no weight_map of tensor names to shard files")
        shards = []
        for name in dict.fromkeys(index.values()):
            shard = directory / name
            if Path(name).name != name or not shard.is_file():
                raise BundleNotFoundError(f"{directory / INDEX} lists the shard {name!r}, which is not in {directory}")
            shards.append(shard)
        return shards
    if (directory / WEIGHTS).is_file():
        return [directory / WEIGHTS]
    if (directory / "pytorch_model.bin").is_file():
        raise BundleError(f"{directory} holds pytorch_model.bin, a pickle, which is never read for an LLM; save the "
                          "model as safetensors (transformers' save_pretrained does by default)")
    raise BundleNotFoundError(f"{directory} has a config.json but no {WEIGHTS} or {INDEX}")


def chat_template(directory: Path) -> str | None:
    """The directory's chat template: chat_template.jinja, or tokenizer_config.json's (the default of several)."""
    if (directory / TEMPLATE).is_file():
        return (directory / TEMPLATE).read_text(encoding="utf-8")
    if not (directory / TOKENIZER_CONFIG).is_file():
        return None
    template = _object(directory / TOKENIZER_CONFIG).get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _token_strings(directory: Path, tokenizer, config: dict[str, Any]) -> dict[str, str]:
    strings = {}
    settings = _object(directory / TOKENIZER_CONFIG) if (directory / TOKENIZER_CONFIG).is_file() else {}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id")):
        value = settings.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if not isinstance(value, str) and isinstance(config.get(key), int):
            value = tokenizer.id_to_token(config[key])
        strings[name] = value or ""
    return strings


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def special_ids(directory: Path, hf: dict[str, Any], vocab: int) -> dict[str, int]:
    """bos, eos and pad ids: config.json's, then generation_config.json's; pad falls back to eos."""
    generation = _object(directory / GENERATION) if (directory / GENERATION).is_file() else {}
    ids = {}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = _first(hf.get(key))
        ids[key] = _first(generation.get(key)) if value is None else value
    ids["pad_token_id"] = ids["pad_token_id"] if ids["pad_token_id"] is not None else ids["eos_token_id"]
    for key, value in ids.items():
        if not isinstance(value, int) or not 0 <= value < vocab:
            raise BundleError(f"{directory}: {key}={value!r} is not a token id of its vocabulary")
    return ids


def read_directory(directory: Path) -> LLMSource:
    """The LLM in the HF directory `directory` (BundleError or ForeignModelError naming what is missing or differs,
    before any weight is read)."""
    from tokenizers import Tokenizer

    hf = _object(directory / CONFIG)
    chosen = family(hf.get("model_type"), str(directory))
    config = chosen.fields(hf, str(directory))
    files = weight_files(directory)
    if not (directory / TOKENIZER).is_file():
        raise BundleNotFoundError(f"{directory} has no {TOKENIZER}; write one with transformers' "
                                  "AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR)")
    try:
        tokenizer = Tokenizer.from_file(str(directory / TOKENIZER))
    except Exception as error:  # tokenizers raises its own exception for unreadable files
        raise BundleError(f"{directory / TOKENIZER} is not a readable tokenizer ({error})") from None
    config.update(special_ids(directory, hf, config["vocab_size"]))

    origins = {}
    for file in files:
        weights = SafetensorsFile(file)
        origins.update({name.removeprefix("model."): Origin(file, name, weights.shape(name)) for name in weights.names
                        if weights.is_float(name)})

    def tensors() -> Iterator[tuple[str, np.ndarray]]:
        for file in files:
            weights = SafetensorsFile(file)
            yield from ((name, weights.array(origin.name)) for name, origin in origins.items() if origin.file == file)

    licence = hf.get("license") if isinstance(hf.get("license"), str) else None
    return LLMSource(directory, "hf", chosen.names[0], config, tokenizer, chat_template(directory),
                     _token_strings(directory, tokenizer, config), files, tensors, origins, licence)
