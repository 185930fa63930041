"""Type and range checks shared by every options and manifest dataclass: one place, one wording.

Each check raises `error` (an `OptionError` for options, a `BundleError` for manifests) naming the field, the
value and what is accepted. A bool is not an int, a float is not an int, NaN and infinities are never numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .errors import LocsumError, OptionError


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_int(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None, *,
              optional: bool = False, error: type[LocsumError] = OptionError) -> None:
    """`value` is an int (not a bool) within [low, high]; None too when `optional`."""
    if value is None and optional:
        return
    accepted = "an integer" + (" or None" if optional else "")
    if low is not None and high is not None:
        accepted += f" from {low} to {high}"
    elif low is not None:
        accepted += f" of at least {low}"
    elif high is not None:
        accepted += f" of at most {high}"
    if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        raise error(f"{name}={_show(value)} is not accepted; {name} must be {accepted}")


def check_float(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                optional: bool = False, error: type[LocsumError] = OptionError) -> None:
    """`value` is a finite real number (int or float, not bool) within [low, high]."""
    if value is None and optional:
        return
    accepted = "a finite number" + (" or None" if optional else "")
    if low is not None:
        accepted += f" >= {low}"
    if high is not None:
        accepted += f" <= {high}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or (low is not None and value < low) or (
        high is not None and value > high
    ):
        raise error(f"{name}={_show(value)} is not accepted; {name} must be {accepted}")


def check_bool(name: str, value: Any, *, error: type[LocsumError] = OptionError) -> None:
    if not isinstance(value, bool):
        raise error(f"{name}={_show(value)} is not accepted; {name} must be True or False")


def check_choice(name: str, value: Any, choices: Sequence[str], *, error: type[LocsumError] = OptionError) -> None:
    if not isinstance(value, str) or value not in choices:
        raise error(f"{name}={_show(value)} is not accepted; {name} must be one of {list(choices)}")


def check_str(name: str, value: Any, *, optional: bool = False, error: type[LocsumError] = OptionError) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        accepted = "a string" + (" or None" if optional else "")
        raise error(f"{name}={_show(value)} is not accepted; {name} must be {accepted}")


def check_mapping(name: str, value: Any, *, error: type[LocsumError] = OptionError) -> None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise error(f"{name} must be an object with string keys, got {type(value).__name__}")


def check_keys(name: str, values: dict[str, Any], known: Sequence[str], required: Sequence[str] = (), *,
               error: type[LocsumError] = OptionError) -> None:
    """`values` has no key outside `known` and every key of `required`."""
    unknown = sorted(set(values) - set(known))
    missing = sorted(set(required) - set(values))
    problems = []
    if unknown:
        problems.append(f"unknown keys {unknown}")
    if missing:
        problems.append(f"missing keys {missing}")
    if problems:
        raise error(f"{name} has {' and '.join(problems)}; accepted keys are {sorted(known)}")
