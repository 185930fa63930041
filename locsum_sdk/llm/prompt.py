"""The frame around each unit, from the model's own chat template: the unit's text, with the instruction set at export
(and the query, where there is one), as the user's turn, up to where the assistant's answer begins.

The template is rendered once (in Jinja's immutable sandbox, as transformers renders it) around marker strings that
stand for the text and the query; the pieces between them become the frame's token ids (`unit_head`,
`query_head`, `query_tail`, `unit_tail`), tokenized with the template's own special tokens. The last token of the
generation prompt is the summary's first input (`decoder_start_token_id`), and the token the template closes the
assistant's turn with is where a summary ends (`eos_token_id`). At run time the frame is placed by id; every text is
encoded with special tokens' strings as plain text (`tokenizer_file.read_tokenizer`).

A SentencePiece-style tokenizer (Llama 2's, Mistral's) puts its word-start marker before every text it encodes alone,
where encoding the whole prompt puts it only where a space is: the pieces that follow a text (the query's head, the
tail) are encoded without that marker, and a piece that ends in a space before a text drops the marker token that
space became, as the text's own first piece carries it. The frame's ids with a text's are then the ids of the whole
prompt, as transformers encodes it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import BundleError, OptionError
from ..words import SENTENCEPIECE_MARKER as _MARKER

TEXT, QUERY, ANSWER = "\u2063LOCSUM-TEXT\u2063", "\u2063LOCSUM-QUERY\u2063", "\u2063LOCSUM-ANSWER\u2063"


@dataclass(frozen=True)
class Instruction:
    """What the user's turn asks after the unit's text (recorded in the bundle's manifest), and the chat template
    that frames it where the model's own is missing or not wanted."""

    summarize: str = "Summarize the text above in a few sentences."  # the last paragraph of every turn
    question: str = "Answer this question about the text: "  # before the query, where there is one
    chat_template: str | None = None  # a Jinja chat template in place of the model's own (None: the model's)

    def __post_init__(self) -> None:
        if self.chat_template is not None and (not isinstance(self.chat_template, str)
                                               or not self.chat_template.strip()):
            raise OptionError("chat_template must be the text of a Jinja chat template, or None for the model's own")
        for name, value in asdict(self).items():
            if name == "chat_template":
                continue
            if not isinstance(value, str) or not value.strip() and name == "summarize":
                raise OptionError(f"instruction {name}={value!r} must be a string (summarize: not empty)")
            if any(marker in value for marker in (TEXT, QUERY, ANSWER)):
                raise OptionError(f"instruction {name} holds an internal marker character (U+2063); remove it")

    def content(self, text: str, query: str | None) -> str:
        """The user's turn: the text, the question and query if any, the instruction."""
        asked = f"\n\n{self.question}{query}" if query is not None else ""
        return f"{text}{asked}\n\n{self.summarize}"


def render(template: str, messages: list[dict[str, str]], generation: bool, tokens: dict[str, str]) -> str:
    """The chat template rendered for `messages` in Jinja's immutable sandbox (no attribute of Python objects
    reachable); BundleError naming what failed."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return "26 Jul 2024" if "%" in fmt else fmt  # a fixed date: the frame must not change from day to day

    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
    environment.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    try:
        return environment.from_string(template).render(messages=messages, add_generation_prompt=generation,
                                                        tools=None, documents=None, date_string="26 Jul 2024",
                                                        **tokens)
    except jinja2.exceptions.TemplateError as error:
        raise BundleError(f"the model's chat template does not render a user's turn ({error})") from None


def chat_frame(template: str, tokenizer, instruction: Instruction, tokens: dict[str, str], eos_token_id: int,
               where: str) -> dict[str, Any]:
    """The frame's ids (`LlamaConfig`'s unit_head, unit_tail, query_head, query_tail, decoder_start_token_id and
    eos_token_id) from `template`; `tokens` are the strings a template reads (bos_token, eos_token)."""
    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    following = _without_marker(tokenizer)
    marker = None if following is None else tokenizer.token_to_id(_MARKER)

    def framing(text: str, after_text: bool, before_text: bool) -> list[int]:
        """A frame piece's ids: after a text without the marker put before what is encoded alone; before a text
        without the marker token its last space became."""
        found = (following if after_text and following is not None else tokenizer).encode(
            text, add_special_tokens=False).ids
        if before_text and marker is not None and text.endswith(" ") and found and found[-1] == marker:
            return found[:-1]
        return found

    asked = render(template, [{"role": "user", "content": instruction.content(TEXT, QUERY)}], True, tokens)
    plain = render(template, [{"role": "user", "content": instruction.content(TEXT, None)}], True, tokens)
    if asked.count(TEXT) != 1 or asked.count(QUERY) != 1 or plain.count(TEXT) != 1:
        raise BundleError(f"{where}: the chat template does not place the user's turn once, as it was given")
    head, rest = asked.split(TEXT)
    query_head, tail = rest.split(QUERY)
    plain_head, plain_tail = plain.split(TEXT)
    expected_tail = f"\n\n{instruction.summarize}"
    if plain_head != head or not tail.startswith(expected_tail) or plain_tail != expected_tail + \
            tail[len(expected_tail):]:
        raise BundleError(f"{where}: the chat template frames a turn with a query differently from one without")
    tail_ids = framing(tail, after_text=True, before_text=False)
    if not tail_ids:
        raise BundleError(f"{where}: the chat template ends the user's turn with nothing; no summary can start")
    answered = render(template, [{"role": "user", "content": "x"}, {"role": "assistant", "content": ANSWER}], False,
                      tokens)
    after = ids(answered.split(ANSWER, 1)[1]) if ANSWER in answered else []
    special = set(tokenizer.get_added_tokens_decoder())
    end = after[0] if after and after[0] in special else eos_token_id
    return {"unit_head": framing(head, after_text=False, before_text=True), "unit_tail": tail_ids[:-1],
            "query_head": framing(query_head, after_text=True, before_text=True), "query_tail": [],
            "decoder_start_token_id": tail_ids[-1], "eos_token_id": end}


def _without_marker(tokenizer):
    """A copy of a SentencePiece-style `tokenizer` that does not put its word-start marker before what it encodes
    (its normalizer's `Prepend`, or its Metaspace's prepend scheme, left out); None for a tokenizer that puts none."""
    from tokenizers import Tokenizer

    spec = json.loads(tokenizer.to_str())
    changed = copy.deepcopy(spec)
    normalizer = changed.get("normalizer") or {}
    if normalizer.get("type") == "Prepend" and normalizer.get("prepend") == _MARKER:
        changed["normalizer"] = None
    elif normalizer.get("type") == "Sequence":
        normalizer["normalizers"] = [part for part in normalizer["normalizers"]
                                     if not (part.get("type") == "Prepend" and part.get("prepend") == _MARKER)]
    parts = [changed.get("pre_tokenizer") or {}]
    parts += parts[0].get("pretokenizers") or []
    for part in parts:
        if part.get("type") == "Metaspace":
            part["prepend_scheme"] = "never"
            part.pop("add_prefix_space", None)
    return None if changed == spec else Tokenizer.from_str(json.dumps(changed))


def fixed_frame(pieces: tuple[str, str, str, str], tokenizer, where: str) -> dict[str, Any]:
    """The frame of four fixed texts (before the text; before and after a query; after the text up to the
    assistant's turn, whose first newline is the summary's first input): the default bundle's, which its training
    read (`base_model.CHAT_PROMPT`)."""
    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    head, query_head, query_tail, tail = (ids(text) for text in pieces)
    whole = ids(pieces[3] + "\n")
    if whole[:-1] != tail or ids("\n") != whole[-1:]:
        raise BundleError(f"{where}: the prompt does not end in a newline token of its own; the summary cannot start "
                          "from it")
    return {"unit_head": head, "unit_tail": tail, "query_head": query_head, "query_tail": query_tail,
            "decoder_start_token_id": whole[-1]}
