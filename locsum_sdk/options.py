"""The options of a call and of a bundle's defaults: the kind's unit options, the limits and the decoding options,
and how overrides merge.

Overrides name any field of any group; a name that belongs to another kind's unit options is refused as such, any
other unknown name with the accepted ones listed, and a default yields to an override it would contradict.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from . import kinds
from .configs.model import step_shape
from .errors import LocsumError, OptionError
from .generation import GenerationOptions
from .kinds import Kind
from .limits import LimitOptions
from .validation import check_keys, is_int

SHARED = {"limits": LimitOptions, "generation": GenerationOptions}


def _names(group: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(group))


@dataclass(frozen=True)
class Options:
    """One value of every option of one kind."""

    units: Any  # the kind's unit options (`Kind.unit_options`)
    limits: LimitOptions
    generation: GenerationOptions

    @classmethod
    def from_settings(cls, settings: dict[str, dict[str, Any]], kind: Kind) -> Options:
        """Options from saved settings ({"units": {...}, "limits": {...}, "generation": {...}}, each optional)."""
        values = {}
        for key, group in {"units": kind.unit_options, **SHARED}.items():
            saved = settings.get(key) or {}
            check_keys(key, saved, _names(group))
            values[key] = group(**saved)
        return cls(**values)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(name for key in ("units", *SHARED) for name in _names(type(getattr(self, key)))))

    def replace(self, /, **overrides: Any) -> Options:
        """These options with `overrides` (any field of any group) applied and validated.

        A default yields to an override it would contradict: `max_length=8` over a default `min_length=20`
        lowers min_length to 8."""
        unknown = sorted(set(overrides) - set(self.names))
        if unknown:
            others: dict[str, list[str]] = {}
            for kind in kinds.REGISTRY.values():
                if kind.unit_options is not type(self.units):
                    for name in _names(kind.unit_options):
                        others.setdefault(name, []).append(kind.name)
            foreign = [f"{name} (taken by {', '.join(sorted(others[name]))})" for name in unknown if name in others]
            if foreign:
                raise OptionError(f"option(s) {'; '.join(foreign)} belong to other kinds of model; this one takes "
                                  f"{list(self.names)}")
            raise OptionError(f"unknown option(s) {unknown}; accepted options are {list(self.names)}")
        overrides = dict(overrides)
        length = overrides.get("max_length")
        if "min_length" not in overrides and is_int(length):
            overrides["min_length"] = max(0, min(self.generation.min_length, length))
        groups = {key: getattr(self, key) for key in ("units", *SHARED)}
        return Options(**{
            key: dataclasses.replace(group, **{k: v for k, v in overrides.items() if k in _names(type(group))})
            for key, group in groups.items()
        })

    def check_model(self, model: dict[str, Any], error: type[LocsumError] = OptionError) -> None:
        """The options fit the model (its config as a dict): the unit size and max_length within its learned
        positions (on a Llama backbone, their sum), and whatever else the kind's unit options check (their
        `check_model`, when they have one)."""
        positions = model["max_positions"]
        field = type(self.units).UNIT_TOKENS
        for name, value in ((field, getattr(self.units, field)), ("max_length", self.generation.max_length)):
            if value > positions:
                raise error(f"{name}={value} is over the model's {positions} positions; use at most {positions}")
        unit, length = getattr(self.units, field), self.generation.max_length
        if length > self.longest_summary(model):
            raise error(f"{field}={unit} and max_length={length} are over the model's {positions} positions together "
                        f"(a summary continues each unit); keep their sum at most {positions}")
        if hasattr(self.units, "check_model"):
            self.units.check_model(model, error)

    def longest_summary(self, model: dict[str, Any]) -> int:
        """The largest max_length that these options' units leave within the model's positions (all of them, unless
        the summary continues each unit)."""
        positions = model["max_positions"]
        unit = getattr(self.units, type(self.units).UNIT_TOKENS)
        return positions - unit if step_shape(model).continues_units else positions

    def to_settings(self) -> dict[str, dict[str, Any]]:
        return {key: dataclasses.asdict(getattr(self, key)) for key in ("units", *SHARED)}


def checkpoint_defaults(saved: dict[str, Any], options: dict[str, Any], model: dict[str, Any], kind: Kind) -> Options:
    """The default options of a checkpoint's model (its config as a dict): its `saved` ones with `options` applied
    one by one. Library defaults that the checkpoint did not save are fitted to the model's positions (a 512-position
    model gets page_tokens and max_length of at most 512; where the summary continues each unit, a unit leaves
    max_length's positions free), so no default makes a valid option fail."""
    positions = model["max_positions"]
    base = Options.from_settings(saved, kind)
    fitted = {}
    continues = step_shape(model).continues_units
    length = options.get("max_length", saved.get("generation", {}).get("max_length"))
    if length is None:
        length = fitted["max_length"] = min(base.generation.max_length, positions // 2 if continues else positions)
    room = positions - length if continues and isinstance(length, int) else positions
    sized = (kind.unit_options.UNIT_TOKENS, *getattr(kind.unit_options, "ALSO_WITHIN_POSITIONS", ()))
    for name in sized:
        if name not in saved.get("units", {}) and name not in options:
            fitted[name] = max(1, min(getattr(base.units, name), room))
    return base.replace(**fitted).replace(**options)


def parse_assignment(text: str) -> tuple[str, Any] | None:
    """'name=value' as typed on a command line -> (name, value), the value read as JSON where it is JSON (16,
    true, 0.5) and kept as text otherwise; None when `text` is not of that form."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        return None
    try:
        return name.strip(), json.loads(value)
    except json.JSONDecodeError:
        return name.strip(), value
