"""``asgi-router replay``: recorded requests re-resolved with a (new) configuration, differences reported.

The records are the lines a :class:`~asgi_router.observability.jsonl.JsonlSink` wrote: each
request's ``model``, the facts its rules read, and the rule and plan it got. Each is resolved
again, by the new configuration's own resolver, from its recorded facts; nothing is sent
anywhere. A request *routes differently* when another rule chooses its plan, when its plan has
other candidates, or, for plans whose order is the configuration's alone (``order`` groups and
direct models), when their order changed; ``rotate`` and the strategies that read live numbers
order each request anew, so for them only the set of candidates is compared. A request the new
configuration would refuse (an unknown group, a removed provider) is reported as such.

Facts are only those the recording configuration's rules read: a new rule on a header or
``metadata`` key that no record carries is evaluated as if it were absent, and the report says
so. Long files get a progress bar on stderr (by bytes read; only on a terminal unless asked).
"""

from __future__ import annotations

import glob
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, TextIO

from asgi_router.cli.explain import plan_group
from asgi_router.config.config_error import ConfigError
from asgi_router.config.settings import RouterSettings
from asgi_router.routing.plan import Plan, ResolveError, Resolver
from asgi_router.routing.recorded import recorded_facts, rule_inputs

__all__ = ["LONG_FILE", "NOT_RECORDS", "Change", "Progress", "expand", "replay"]

#: Files at least this long get a progress bar on a terminal.
LONG_FILE: Final = 1024 * 1024
#: The exit status when some lines were not records (and nothing else failed the run).
NOT_RECORDS: Final = 2
_FIXED: Final = frozenset({"order"})
_BAR: Final = 30


@dataclass(frozen=True, slots=True)
class Change:
    """How one recorded request would route now."""

    request_id: str
    ref: str
    was: str
    now: str


class Progress:
    """A one-line bar on ``out`` (stderr), redrawn at most ten times a second."""

    def __init__(self, total: int, out: TextIO) -> None:
        self._total = max(1, total)
        self._out = out
        self._drawn = 0.0

    def update(self, done: int, lines: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._drawn < 0.1:
            return
        self._drawn = now
        share = min(1.0, done / self._total)
        filled = round(share * _BAR)
        self._out.write(f"\r[{'#' * filled}{'.' * (_BAR - filled)}] {share:4.0%}  {lines:,} lines")
        if final:
            self._out.write("\n")
        self._out.flush()


def expand(patterns: Sequence[str]) -> list[Path]:
    """The record files ``patterns`` name: paths, or globs (``records-*.jsonl``, for the shell
    that did not expand them), each file once, in the order given (a glob's matches sorted)."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise ConfigError(f"no records match {pattern!r}")
            found.update((Path(match), None) for match in matches)
        else:
            found[Path(pattern)] = None
    return list(found)


def _lines(handles: Sequence[BinaryIO], progress: Progress | None) -> Iterator[tuple[str, bytes]]:
    """Every non-blank line of every file in turn, with where it is (``file:line``)."""
    done = lines = 0
    for handle in handles:
        for number, line in enumerate(handle, 1):
            done += len(line)
            lines += 1
            if line.strip():
                yield f"{handle.name}:{number}" if len(handles) > 1 else f"line {number}", line
            if progress is not None:
                progress.update(done, lines)
    if progress is not None:
        progress.update(done, lines, final=True)


def _files(records: Sequence[Path]) -> str:
    if len(records) == 1:
        return str(records[0])
    shown = ", ".join(str(path) for path in records[:3]) + (", ..." if len(records) > 3 else "")
    return f"{len(records)} files ({shown})"


def _plan_text(route: str, plan: list[str]) -> str:
    return f"rule {route}: [{' '.join(plan)}]"


def _differs(settings: RouterSettings, record: dict[str, Any], plan: Plan) -> bool:
    if plan.rule != record.get("route", "default"):
        return True
    was, now = [str(key) for key in record.get("plan", [])], list(plan.labels)
    group = plan_group(settings, plan)
    if group is None or settings.groups[group].strategy in _FIXED:
        return was != now
    return sorted(was) != sorted(now)


def _unseen_inputs(settings: RouterSettings, headers: set[str], metadata: set[str]) -> list[str]:
    wanted_headers, wanted_metadata = rule_inputs(settings.rules)
    return [f"header {name}" for name in wanted_headers if name not in headers] + [
        f"metadata.{key}" for key in wanted_metadata if key not in metadata
    ]


def _replayed(resolver: Resolver, line: bytes) -> tuple[dict[str, Any], str, dict[str, Any], str, Plan | ResolveError]:
    """One line's record, ref, facts, recorded plan (as text) and the plan it gets now; raises
    on a line that is not a record."""
    record = json.loads(line)
    ref, facts = str(record["ref"]), record.get("facts") or {}
    was = _plan_text(str(record.get("route", "default")), [str(key) for key in record.get("plan", [])])
    if not isinstance(facts, dict) or not all(
        isinstance(facts.get(key) or {}, dict) for key in ("headers", "metadata")
    ):
        raise TypeError("facts")
    return record, ref, facts, was, resolver.resolve_string(ref, recorded_facts(facts))


def _shown(text: str) -> str:
    """``text`` safe for a terminal: what is not printable (escape sequences, control
    characters) is written as its Python escape."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


def _open(records: Sequence[Path], stack: ExitStack) -> tuple[list[BinaryIO], int]:
    handles: list[BinaryIO] = []
    size = 0
    for path in records:
        try:
            size += path.stat().st_size
            handles.append(stack.enter_context(path.open("rb")))
        except OSError as exc:
            raise ConfigError(f"cannot read the records {path}: {exc.strerror or exc}") from None
    return handles, size


def replay(
    settings: RouterSettings,
    config: Path,
    records: Sequence[Path],
    show: int,
    progress: bool | None,
    fail_on_change: bool,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Replay the ``records`` files, as one; print the report. 1 on ``fail_on_change`` with
    changes, else 0."""
    with ExitStack() as stack:
        handles, size = _open(records, stack)
        return _replay(settings, config, records, handles, size, show, progress, fail_on_change, out, err)


def _replay(
    settings: RouterSettings,
    config: Path,
    records: Sequence[Path],
    handles: Sequence[BinaryIO],
    size: int,
    show: int,
    progress: bool | None,
    fail_on_change: bool,
    out: TextIO,
    err: TextIO,
) -> int:
    if progress is None:
        progress = size >= LONG_FILE and err.isatty()
    resolver = Resolver(settings)
    same = unreadable = 0
    changes: list[Change] = []
    summary: Counter[str] = Counter()
    headers_seen: set[str] = set()
    metadata_seen: set[str] = set()
    for where, line in _lines(handles, Progress(size, err) if progress else None):
        try:
            record, ref, facts, was, plan = _replayed(resolver, line)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            # Not a record this version wrote (mis-shaped facts, a header value that is not
            # latin-1, ...): counted, never a traceback.
            unreadable += 1
            continue
        headers_seen.update(str(name) for name in facts.get("headers") or {})
        metadata_seen.update(str(key) for key in facts.get("metadata") or {})
        if isinstance(plan, ResolveError):
            now = f"refused: {plan.status} {plan.code}"
        elif _differs(settings, record, plan):
            now = _plan_text(plan.rule, list(plan.labels))
        else:
            same += 1
            continue
        request_id = str(record.get("request_id", where))
        changes.append(Change(_shown(request_id), _shown(ref), _shown(was), _shown(now)))
        summary[f"{_shown(ref)}: {_shown(was)} -> {_shown(now)}"] += 1
    total = same + len(changes)
    refused = sum(1 for change in changes if change.now.startswith("refused"))
    lines = [
        f"replayed {total:,} requests from {_files(records)} with {config}: {same:,} route the same, "
        f"{len(changes) - refused:,} differently, {refused:,} would be refused"
        + (f"; {unreadable:,} lines were not records" if unreadable else "")
    ]
    unseen = _unseen_inputs(settings, headers_seen, metadata_seen)
    if unseen and total:
        lines.append(
            f"note: the rules read {', '.join(unseen)}, which no record carries (the recording configuration's "
            "rules did not name them): they replay as absent"
        )
    if summary:
        lines += ["", "changes, most frequent first:"]
        lines += [f"  {count:>7,}  {change}" for change, count in summary.most_common()]
    if changes and show > 0:
        lines += ["", f"the first {min(show, len(changes))}:"]
        lines += [f"  {c.request_id}  {c.ref}: {c.was} -> {c.now}" for c in changes[:show]]
    print("\n".join(lines), file=out)
    if fail_on_change and changes:
        return 1
    return NOT_RECORDS if unreadable else 0
