"""The bases every record stands on (Checked, Strict, Record), the knob value type and the clock."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Self

from pydantic import BaseModel, ConfigDict

Scalar = str | int | float | bool | None


class Checked(BaseModel):
    """A model whose copies name only its own fields: pydantic's `model_copy(update=...)` does not
    validate, so a renamed field would otherwise be set beside the real one, silently."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        unknown = sorted(set(update or {}) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(unknown)}")
        return super().model_copy(update=update, deep=deep)


class Strict(Checked):
    model_config = ConfigDict(extra="forbid")


class Record(Checked):
    """A finished fact: never mutated after it is made."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def utc_now_ms() -> str:
    """utc_now to the millisecond: when a launch started, so that trials side by side show their overlap."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
