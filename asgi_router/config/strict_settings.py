"""The base every settings table is built on: unknown keys refused, immutable once loaded.

A misspelt key (``first_bytes`` for ``first_byte``) would otherwise be ignored and the default
silently used; refusing it at load tells the operator at once. ``hide_input_in_errors`` keeps a
validation error from ever echoing the value it refused, which may be an API key.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictSettings"]


class StrictSettings(BaseModel):
    """Base of the settings tables: unknown keys refused, frozen, inputs never echoed in errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)
