"""The three option groups every call and every bundle's defaults are made of, and how overrides merge.

`PagingOptions` (how text becomes pages), `LimitOptions` (how much input a call accepts) and `GenerationOptions`
(decoding). Overrides name any field of any group; unknown names are refused with the accepted ones listed,
and a default yields to an override it would contradict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import OptionError
from .generation import GenerationOptions
from .limits import LimitOptions
from .units import PagingOptions

GROUPS = {"units": PagingOptions, "limits": LimitOptions, "generation": GenerationOptions}
NAMES = {key: tuple(f.name for f in dataclasses.fields(group)) for key, group in GROUPS.items()}
ALL_NAMES = tuple(sorted(name for names in NAMES.values() for name in names))


@dataclass(frozen=True)
class Options:
    """One value of every option."""

    units: PagingOptions
    limits: LimitOptions
    generation: GenerationOptions

    @classmethod
    def from_settings(cls, settings: dict[str, dict[str, Any]]) -> "Options":
        """Options from saved settings ({"units": {...}, "limits": {...}, "generation": {...}}, each optional)."""
        values = {}
        for key, group in GROUPS.items():
            saved = settings.get(key) or {}
            unknown = sorted(set(saved) - set(NAMES[key]))
            if unknown:
                raise OptionError(f"{key} has unknown keys {unknown}; accepted keys are {list(NAMES[key])}")
            values[key] = group(**saved)
        return cls(**values)

    def replace(self, **overrides: Any) -> "Options":
        """These options with `overrides` (any field of any group) applied and validated.

        A default yields to an override it would contradict: `max_length=8` over a default `min_length=20`
        lowers min_length to 8."""
        unknown = sorted(set(overrides) - set(ALL_NAMES))
        if unknown:
            raise OptionError(f"unknown option(s) {unknown}; accepted options are {list(ALL_NAMES)}")
        overrides = dict(overrides)
        length = overrides.get("max_length")
        if "min_length" not in overrides and isinstance(length, int) and not isinstance(length, bool):
            overrides["min_length"] = max(0, min(self.generation.min_length, length))
        return Options(**{
            key: dataclasses.replace(getattr(self, key), **{k: v for k, v in overrides.items() if k in NAMES[key]})
            for key in GROUPS
        })

    def to_settings(self) -> dict[str, dict[str, Any]]:
        return {key: dataclasses.asdict(getattr(self, key)) for key in GROUPS}
