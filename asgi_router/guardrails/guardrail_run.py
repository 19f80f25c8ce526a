"""A router's guardrails: which checks a request runs, and running them on its prompt and answer.

Built once per router (and only when some guardrail is named: a router without them holds
``None`` and does nothing per request). :meth:`Guardrails.select` gives a request its
:class:`GuardSet`: the checks of ``guardrails_default``, of the group its ref names, of the group
its plan resolved to (a rule's, a ``downgrade_to``'s) and of the ref a caller cap downgraded it
to, in that order, each once. Sets are cached per combination of groups (a bounded number: the
configuration's).

The input checks run once, after the plan and before any upstream (and before a response cache's
lookup): a mask rewrites the request's payload in place, so every candidate's body, and every
continuation of a stream (built from the same payload), carries the masked texts. The output
checks run on each candidate's answer before it commits to the client: a ``fail_over`` makes the
attempt fail with ``guardrail_failed``, so the decision point asks the next candidate.

A check that raises (or a callable that answers nonsense) fails the request with 500
``guardrail_error``, logged once with its traceback; a match never puts the matched text in the
client's error or the log.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Final

from asgi_router.config.config_error import ConfigError
from asgi_router.config.guardrail_settings import GuardrailSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.core.refs import GROUP_NAMESPACE
from asgi_router.core.router_errors import RouterError
from asgi_router.guardrails.builtin_checks import Asked, Check, GuardrailOutcome, Stage, Verdict, build_check
from asgi_router.guardrails.guardrail_api import GuardrailFunction
from asgi_router.guardrails.schema_subset import schema_of
from asgi_router.guardrails.stream_texts import HeldEvents
from asgi_router.guardrails.text_slots import answer_slots, prompt_slots, read_slots, write_slots
from asgi_router.observability.events import logger

__all__ = ["GuardSet", "Guardrails", "InputChecked", "OutputChecked", "Ran", "caller_name"]

#: One check's run: its name, the stage, and what it came to.
Ran = tuple[str, Stage, GuardrailOutcome]

_GROUP_PREFIX: Final = GROUP_NAMESPACE + "/"
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _blocked(name: str, stage: Stage) -> RouterError:
    return RouterError(400, "guardrail_blocked", f"blocked by guardrail {name} ({stage})", guardrail=name)


def _failed(name: str, stage: Stage) -> RouterError:
    return RouterError(500, "guardrail_error", f"guardrail {name} failed ({stage}); see the server log", guardrail=name)


@dataclass(slots=True)
class InputChecked:
    """The input checks' verdict: what ran, and the refusal (``None``: go on, masked or not)."""

    ran: list[Ran]
    error: RouterError | None = None
    masked: bool = False


@dataclass(slots=True)
class OutputChecked:
    """The output checks' verdict on one answer: what ran, its body (masked or as it came), and
    whether it fails over or is refused."""

    ran: list[Ran]
    body: bytes
    fail_over: bool = False
    error: RouterError | None = None


class GuardSet:
    """The checks one request runs, at each stage (the same object for every request with the
    same groups)."""

    __slots__ = ("_runner", "buffer", "input", "output")

    def __init__(self, runner: Guardrails, checks: Sequence[Check], buffer: bool) -> None:
        self._runner = runner
        self.input = tuple(check for check in checks if "input" in check.stages)
        self.output = tuple(check for check in checks if "output" in check.stages)
        #: A stream's answer is held and checked before its first byte (a group's ``buffer``).
        self.buffer = buffer and bool(self.output)

    async def check_input(
        self, payload: dict[str, Any], path: str, caller: str | None, model: str, tokens: Callable[[], int]
    ) -> InputChecked:
        """Run the input checks over ``payload``'s texts; a mask is written back into it."""
        checked = InputChecked([])
        if not self.input:
            return checked
        slots = prompt_slots(payload, path)
        texts = read_slots(slots)
        asked = Asked("input", caller, path, model, tokens=tokens)
        masked, error, _ = await self._runner.run(self.input, texts, asked, checked.ran)
        if error is not None:
            checked.error = error
        elif masked is not None:
            write_slots(slots, masked)
            checked.masked = True
        return checked

    async def check_output(
        self, body: bytes, payload: Mapping[str, Any], path: str, caller: str | None, model: str
    ) -> OutputChecked:
        """Run the output checks over a whole answer's texts; a mask gives a new body."""
        checked = OutputChecked([], body)
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        slots = answer_slots(answer) if isinstance(answer, dict) else []
        masked = await self._run_output(checked, read_slots(slots), payload, path, caller, model)
        if masked is not None:
            write_slots(slots, masked)
            checked.body = _COMPACT.encode(answer).encode()
        return checked

    async def check_stream(
        self, body: bytes, payload: Mapping[str, Any], path: str, caller: str | None, model: str
    ) -> OutputChecked:
        """Run the output checks over a held stream's texts (``output_stream = "buffer"``); a mask
        gives the same events carrying the masked texts."""
        checked = OutputChecked([], body)
        held = HeldEvents(body)
        masked = await self._run_output(checked, held.texts(), payload, path, caller, model)
        if masked is not None:
            checked.body = held.masked(masked)
        return checked

    async def _run_output(
        self,
        checked: OutputChecked,
        texts: tuple[str, ...],
        payload: Mapping[str, Any],
        path: str,
        caller: str | None,
        model: str,
    ) -> tuple[str, ...] | None:
        """Run the output checks over ``texts``, noting in ``checked`` an error or a fail-over;
        the masked texts to write back, when a check masked and none refused."""
        asked = Asked("output", caller, path, model, schema=schema_of(payload))
        masked, error, fail_over = await self._runner.run(self.output, texts, asked, checked.ran)
        if error is not None:
            checked.error = error
        elif fail_over:
            checked.fail_over = True
        else:
            return masked
        return None


class Guardrails:
    """A router's named checks and which requests run them; one per router, no per-request state."""

    def __init__(self, settings: RouterSettings, functions: Mapping[str, GuardrailFunction]) -> None:
        tables: dict[str, GuardrailSettings] = dict(settings.guardrails)
        for name in functions:  # a function with no table of its own: both stages, its answer decides
            tables.setdefault(name, GuardrailSettings(kind="callable", stage="both"))
        checks: dict[str, Check] = {}
        problems: list[str] = []
        for name, table in tables.items():
            function: GuardrailFunction | None = None
            if table.kind == "callable":
                function = functions.get(name)
                if table.function is not None:
                    try:
                        function = _import(table.function)
                    except Exception as exc:
                        problems.append(f"guardrails.{name}.function: cannot import {table.function} ({exc})")
                        continue
                if function is None:
                    problems.append(
                        f'guardrails.{name}: kind "callable" needs a function (function = "pkg.mod:fn", or '
                        f"ModelRouter(guardrails={{{name!r}: fn}}))"
                    )
                    continue
                if not callable(function):
                    problems.append(f"guardrails.{name}: {function!r} is not callable")
                    continue
            checks[name] = build_check(name, table, function)
        known = set(tables)
        for name in settings.guardrails_default:
            if name not in known:
                problems.append(f"guardrails_default: {name!r} names no guardrail ({_known(known)})")
        groups: dict[str, tuple[str, ...]] = {}
        buffered: set[str] = set()
        for group, group_table in settings.groups.items():
            for name in group_table.guardrails:
                if name not in known:
                    problems.append(f"groups.{group}.guardrails: {name!r} names no guardrail ({_known(known)})")
            groups[group] = tuple(group_table.guardrails)
            if group_table.output_stream == "buffer":
                buffered.add(group)
        if problems:
            raise ConfigError("\n".join(problems))
        self._checks = checks
        self._default = tuple(settings.guardrails_default)
        self._groups = groups
        self._buffered = buffered
        self._sets: dict[tuple[str | None, ...], GuardSet | None] = {}
        #: Blocks per check since the router started (the status page shows them).
        self.blocks: dict[str, int] = {}

    @staticmethod
    def needed(settings: RouterSettings, functions: Mapping[str, GuardrailFunction]) -> bool:
        """Whether a router with these settings runs any guardrail at all (else it builds none)."""
        return bool(settings.guardrails or functions or settings.guardrails_default) or any(
            group.guardrails for group in settings.groups.values()
        )

    def select(self, ref: str, group: str | None, downgrade_to: str | None) -> GuardSet | None:
        """The checks a request for ``ref`` runs, planned to ``group`` (``None``: none)."""
        key = (_group_of(ref), group, _group_of(downgrade_to) if downgrade_to is not None else None)
        try:
            return self._sets[key]
        except KeyError:
            pass
        names = dict.fromkeys(self._default)
        buffer = False
        for named in key:
            if named is not None and named in self._groups:
                names.update(dict.fromkeys(self._groups[named]))
                buffer = buffer or named in self._buffered
        chosen = [self._checks[name] for name in names]
        made = GuardSet(self, chosen, buffer) if chosen else None
        if len(self._sets) < 4096:  # keys are configured groups; a client's ref adds only None
            self._sets[key] = made
        return made

    async def run(
        self, checks: Sequence[Check], texts: tuple[str, ...], asked: Asked, ran: list[Ran]
    ) -> tuple[tuple[str, ...] | None, RouterError | None, bool]:
        """Run ``checks`` in order over ``texts``: the masked texts (``None``: unchanged), the
        refusal, and whether the answer fails over. A block (or a failed check) stops the run."""
        masked: tuple[str, ...] | None = None
        fail_over = False
        stage = asked.stage
        for check in checks:
            try:
                verdict: Verdict = await check.run(masked if masked is not None else texts, asked)
            except Exception:
                logger.exception("guardrail %s failed on the %s; the request is refused", check.name, stage)
                ran.append((check.name, stage, "block"))
                return None, _failed(check.name, stage), False
            outcome = verdict.outcome
            ran.append((check.name, stage, outcome))
            if outcome == "mask":
                masked = verdict.texts
            elif outcome == "block":
                self.blocks[check.name] = self.blocks.get(check.name, 0) + 1
                logger.info("guardrail %s blocked the %s: %s", check.name, stage, verdict.why or "matched")
                return None, _blocked(check.name, stage), False
            elif outcome == "fail_over":
                fail_over = True
        return masked, None, fail_over


def caller_name(caller: str | None, principal: object) -> str | None:
    """Who a check is told asked: the caller caps' name for them, else a principal that is a name."""
    return caller if caller is not None else principal if isinstance(principal, str) else None


def _group_of(ref: str) -> str | None:
    return ref[len(_GROUP_PREFIX) :] if ref.startswith(_GROUP_PREFIX) else None


def _known(names: set[str]) -> str:
    return "configured: " + (", ".join(sorted(names)) if names else "none")


def _import(spec: str) -> GuardrailFunction:
    module, _, attribute = spec.partition(":")
    found: GuardrailFunction = getattr(import_module(module), attribute)
    return found
