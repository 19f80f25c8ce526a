"""Parse a client's JSON body with bounds, so that no body can cost more than its size.

``json.loads`` alone accepts three things a gateway must not:

* **huge integers**: parsing and re-serialising a number is quadratic in its digits. Python's
  own limit (4,300 digits) still lets a 10 MB body of such numbers block the event loop for
  about half a second, and a host app may lift it (``sys.set_int_max_str_digits(0)``). Integer
  literals longer than :data:`MAX_NUMBER_CHARS` are refused here, independently of that setting.
* **non-finite floats**: ``1e999`` parses to ``inf``, which ``json.dumps`` then writes as
  ``Infinity``: not JSON, so the upstream would get a body it cannot parse.
  ``NaN``/``Infinity`` literals are refused too.
* **deep nesting**: anything deeper than :data:`MAX_JSON_DEPTH` is refused. The C parser's
  recursion guard stops pathological depth before Python's stack is at risk; an iterative
  walk then enforces the cap (about a microsecond for an ordinary chat request).

Every refusal is a :class:`JsonRefused` carrying a client-safe message; nothing here raises.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["MAX_JSON_DEPTH", "MAX_NUMBER_CHARS", "JsonRefused", "loads"]

#: Deepest nesting accepted (the top-level object is depth 1). Chat requests nest about 6 deep;
#: tool JSON schemas add two levels per nested object, and providers cap those at 5 to 10.
MAX_JSON_DEPTH: Final = 64
#: Longest integer literal accepted, sign included (a 64-bit integer has at most 20 characters).
MAX_NUMBER_CHARS: Final = 64


@dataclass(frozen=True, slots=True)
class JsonRefused:
    """Why a body was not accepted as JSON; ``message`` is safe to show the client."""

    message: str


class _Refusal(ValueError):
    """Raised inside the parser's hooks to stop parsing; turned into :class:`JsonRefused`."""


def _reject_constant(name: str) -> None:
    raise _Refusal("NaN and Infinity are not JSON")


def _bounded_int(literal: str) -> int:
    if len(literal) > MAX_NUMBER_CHARS:
        raise _Refusal(f"an integer is longer than {MAX_NUMBER_CHARS} digits")
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _Refusal("a number is too large to be a finite float")
    return value


def _too_deep(root: Any, cap: int) -> bool:
    """Whether ``root`` nests deeper than ``cap``: level by level, so it cannot itself recurse.

    Its cost is one ``isinstance`` per value, cheaper for text-heavy chat bodies than even
    counting their brackets.
    """
    level: list[Any] = [root]
    depth = 1
    while level:
        if depth > cap:
            return True
        below: list[Any] = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, (dict, list)):
                    below.append(child)
        level = below
        depth += 1
    return False


# One decoder for every request: ``json.loads`` with hooks would build a new one per call.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_bounded_int, parse_float=_finite_float)


def loads(body: bytes) -> Any | JsonRefused:
    """The parsed body, or why it was refused (invalid, unbounded, or nested too deep)."""
    try:
        # As json.loads does for bytes: UTF-8, -16 or -32 by the first bytes.
        value = _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except _Refusal as exc:
        return JsonRefused(f"request body is not acceptable JSON: {exc}")
    except RecursionError:
        return JsonRefused(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, int digit limits
        return JsonRefused("request body is not valid JSON")
    if isinstance(value, (dict, list)) and _too_deep(value, MAX_JSON_DEPTH):
        return JsonRefused(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    return value
