"""Deadline: the router's own cancel scope, with asyncio.timeout's semantics and a moving deadline.

These pin what the attempt loop, the relay, the body read and the disconnect listener rely on:
a scope swallows only its own cancellation, lets everyone else's through, and leaves the task's
cancellation count as it found it; an armed read that overruns ends the block, one that does
not never does, and re-arming moves the deadline either way.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from asgi_router.core import deadlines
from asgi_router.core.deadlines import Deadline, Reads, reading

from ..doubles import FAKE_CLOCK_BACKEND, counting_deadlines
from ..waiting import eventually

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> object:
    """The loop's timers run on a fake clock: the limits these tests cross take no real time."""
    return FAKE_CLOCK_BACKEND


async def _cancel_soon(scope: Deadline, delay: float = 0.01) -> None:
    await asyncio.sleep(delay)
    scope.cancel()


async def test_a_scope_cancelled_from_another_task_ends_its_block_and_the_code_after_runs() -> None:
    reached_after = False
    with Deadline() as scope:
        helper = asyncio.get_running_loop().create_task(_cancel_soon(scope))
        await asyncio.sleep(5)
    reached_after = True
    await helper
    assert scope.expired and reached_after
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_an_enclosing_scopes_cancellation_passes_through_an_inner_scope() -> None:
    inner_exited_by_exception = False
    with Deadline() as outer:
        helper = asyncio.get_running_loop().create_task(_cancel_soon(outer))
        try:
            with Deadline() as inner:
                await asyncio.sleep(5)
        except asyncio.CancelledError:
            inner_exited_by_exception = True
            raise
    await helper
    assert inner_exited_by_exception
    assert outer.expired and not inner.expired


async def test_an_inner_scopes_cancellation_stops_at_it_and_the_outer_block_goes_on() -> None:
    with Deadline() as outer:
        with Deadline() as inner:
            helper = asyncio.get_running_loop().create_task(_cancel_soon(inner))
            await asyncio.sleep(5)
        await asyncio.sleep(0)  # still inside outer, no longer cancelled
        still_running = True
    await helper
    assert inner.expired and not outer.expired and still_running


async def test_someone_elses_cancellation_propagates_even_when_the_scope_was_cancelled_too() -> None:
    async def body(scopes: list[Deadline]) -> None:
        with Deadline() as scope:
            scopes.append(scope)
            await asyncio.sleep(5)

    scopes: list[Deadline] = []
    task = asyncio.get_running_loop().create_task(body(scopes))
    await asyncio.sleep(0.01)
    scopes[0].cancel()
    task.cancel()  # e.g. the server cancelling the request task at the same time
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not scopes[0].expired


async def test_cancelling_after_the_block_ended_is_a_no_op() -> None:
    with Deadline() as scope:
        await asyncio.sleep(0)
    scope.cancel()
    await asyncio.sleep(0.01)  # a stray cancellation would land here
    assert not scope.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_cancelling_twice_is_one_cancellation_and_the_count_is_restored() -> None:
    with Deadline() as scope:

        async def twice() -> None:
            await asyncio.sleep(0.01)
            scope.cancel()
            scope.cancel()

        helper = asyncio.get_running_loop().create_task(twice())
        await asyncio.sleep(5)
    await helper
    assert scope.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0.01)  # and nothing is left pending on the task


async def test_a_cancellation_that_did_not_land_before_the_block_ended_is_taken_back() -> None:
    # The helper cancels just as the block finishes without awaiting again: the request must
    # not linger on the task and hit a later, unrelated await.
    with Deadline() as scope:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, None)
        await fut
    scope.cancel()  # after exit: nothing happens
    await asyncio.sleep(0.01)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def _stuck_read(*allowances: float) -> tuple[Deadline, float]:
    """Arm each allowance in turn (a read arriving 20 ms into each but the last), then block in
    the last read until the scope ends it; the scope and the seconds it all took."""
    started = asyncio.get_running_loop().time()
    with Deadline() as scope:
        for allowance in allowances[:-1]:
            scope.arm(allowance)
            await asyncio.sleep(0.02)  # within the allowance
        scope.arm(allowances[-1])  # the read that never comes
        await asyncio.sleep(5)
    return scope, asyncio.get_running_loop().time() - started


async def test_an_armed_read_that_overruns_ends_the_block_and_not_before() -> None:
    scope, took = await _stuck_read(0.05)
    assert scope.expired
    assert 0.05 <= took < 2


async def test_reads_that_come_in_time_keep_the_block_going_however_many() -> None:
    # Ten reads, each well within its 100 ms but 200 ms in all: only the last, stuck one ends it.
    scope, took = await _stuck_read(*([0.1] * 10), 0.05)
    assert scope.expired
    assert took >= 0.2 + 0.05


async def test_a_later_deadline_than_the_pending_timer_is_honoured_when_the_timer_fires() -> None:
    # The first arm sets the timer for 100 ms; the second, 20 ms in, asks for 200 ms more: the
    # timer fires early, finds the read not yet due, and waits for the new time.
    scope, took = await _stuck_read(0.1, 0.2)
    assert scope.expired
    assert took >= 0.02 + 0.2


async def test_an_earlier_deadline_than_the_pending_timer_moves_the_timer() -> None:
    started = asyncio.get_running_loop().time()
    with Deadline() as scope:
        scope.arm(5)
        scope.arm(0.02)
        await asyncio.sleep(5)
    assert scope.expired
    assert asyncio.get_running_loop().time() - started < 2


async def test_a_disarmed_scope_never_cancels() -> None:
    with Deadline() as scope:
        scope.arm(0.01)
        scope.disarm()
        await asyncio.sleep(0.05)
    assert not scope.expired


async def test_leaving_an_armed_scope_cancels_its_timer() -> None:
    with Deadline() as scope:
        scope.arm(0.02)
    await asyncio.sleep(0.05)  # the timer would have fired here
    assert not scope.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


class _Overrun(Deadline):
    __slots__ = ("overruns",)

    def __init__(self) -> None:
        super().__init__()
        self.overruns = 0

    def _overrun(self) -> None:
        self.overruns += 1


async def test_a_subclass_decides_what_an_overrun_does() -> None:
    with _Overrun() as scope:
        scope.arm(0.01)
        await asyncio.sleep(0.05)
    assert scope.overruns == 1 and not scope.expired


class _Lender(Deadline):
    """A scope that lends its timer, counting its own overruns (as the listening scope does)."""

    __slots__ = ("overruns",)

    def __init__(self) -> None:
        super().__init__(lends=True)
        self.overruns = 0

    def __enter__(self) -> _Lender:
        super().__enter__()
        return self

    def _overrun(self) -> None:
        self.overruns += 1


def _timers(scope: Deadline) -> int:
    return int(scope._handle is not None)  # the loop timers a scope holds: none or one


async def test_a_scope_inside_a_lender_keeps_no_timer_and_still_ends_when_its_read_overruns() -> None:
    started = asyncio.get_running_loop().time()
    with _Lender() as lender:
        lender.arm(0.01)
        with Deadline() as inner:
            inner.arm(0.05)
            assert _timers(inner) == 0 and _timers(lender) == 1
            await asyncio.sleep(5)
        await asyncio.sleep(0)  # the lender's block goes on
    assert inner.expired and not lender.expired
    assert lender.overruns == 1  # its own mark, once, though its timer fired again for the inner scope
    assert 0.05 <= asyncio.get_running_loop().time() - started < 2


async def test_a_riding_scopes_earlier_deadline_moves_the_lenders_timer() -> None:
    started = asyncio.get_running_loop().time()
    with _Lender() as lender:
        lender.arm(5)
        with Deadline() as inner:
            inner.arm(0.02)
            await asyncio.sleep(5)
    assert inner.expired and lender.overruns == 0
    assert asyncio.get_running_loop().time() - started < 2


async def test_a_riding_scope_that_ends_in_time_is_never_cancelled_and_the_lender_still_fires() -> None:
    with _Lender() as lender:
        lender.arm(0.03)
        with Deadline() as inner:
            inner.arm(0.01)
            await asyncio.sleep(0)  # the read came in time
        await asyncio.sleep(0.06)
    assert not inner.expired and lender.overruns == 1
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_scope_in_a_task_started_inside_the_lender_rides_on_it_and_cancels_only_its_own_task() -> None:
    async def racer() -> bool:
        with Deadline() as scope:
            scope.arm(0.02)
            await asyncio.sleep(5)
        return scope.expired

    with _Lender() as lender:
        task = asyncio.get_running_loop().create_task(racer())
        await asyncio.sleep(0)
        assert lender._riders and _timers(lender._riders[0]) == 0
        assert await task
        await asyncio.sleep(0)  # the lending task itself is not cancelled
    assert not lender.expired and lender.overruns == 0


async def test_a_scope_that_outlives_its_lender_gets_a_timer_of_its_own() -> None:
    gate = asyncio.Event()

    async def racer() -> bool:
        with Deadline() as scope:
            scope.arm(0.05)
            gate.set()
            await asyncio.sleep(5)
        return scope.expired

    with _Lender():
        task = asyncio.get_running_loop().create_task(racer())
        await gate.wait()
    assert await task  # its deadline still ended it, with the lender gone


async def test_a_scope_entered_after_the_lender_ended_keeps_its_own_timer() -> None:
    with _Lender():
        pass
    with Deadline() as scope:
        scope.arm(0.02)
        assert _timers(scope) == 1
        await asyncio.sleep(5)
    assert scope.expired


# --- a bounded stretch of a block (bound/unbound): no scope of its own ------------------------


async def _bounded_sleep(scope: Deadline, seconds: float, sleep: float) -> bool:
    """Sleep ``sleep`` seconds under a bound of ``seconds`` on ``scope``; whether the bound cut it."""
    scope.bound(seconds)
    try:
        await asyncio.sleep(sleep)
    except asyncio.CancelledError:
        if not scope.unbound():
            raise
        return True
    finally:
        scope.unbound()
    return False


async def test_a_bound_stretch_overrunning_is_cut_and_its_cancellation_taken_back() -> None:
    with Deadline() as scope:
        assert await _bounded_sleep(scope, 0.02, 5)
        await asyncio.sleep(0)  # the block goes on
    assert not scope.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_bound_stretch_done_in_time_leaves_nothing_behind() -> None:
    with Deadline() as scope:
        assert not await _bounded_sleep(scope, 0.02, 0)
        await asyncio.sleep(0.06)  # past the bound: nothing cancels the block
    assert not scope.expired and not scope.unbound()


async def test_a_bound_on_a_lender_shares_its_timer_with_its_own_mark_and_its_riders() -> None:
    with _Lender() as lender:
        lender.arm(0.01)
        with Deadline() as rider:
            rider.arm(5)
            assert await _bounded_sleep(lender, 0.05, 5)
            assert _timers(rider) == 0
    assert lender.overruns == 1 and not lender.expired and not rider.expired


async def test_a_bound_on_a_riding_scope_is_cut_by_the_lenders_timer() -> None:
    with _Lender() as lender:
        with Deadline() as rider:
            assert await _bounded_sleep(rider, 0.02, 5)
            assert _timers(rider) == 0
    assert lender.overruns == 0 and not rider.expired


async def test_a_bound_on_a_scope_outliving_its_lender_gets_the_scopes_own_timer() -> None:
    gate = asyncio.Event()

    async def racer() -> bool:
        with Deadline() as scope:
            gate.set()  # the lender ends only once the bound below is set and the racer waits
            return await _bounded_sleep(scope, 0.05, 5)

    with _Lender():
        task = asyncio.get_running_loop().create_task(racer())
        await gate.wait()
    assert await task


async def test_a_bound_cut_while_another_cancellation_is_pending_lets_that_one_through() -> None:
    task = asyncio.current_task()
    assert task is not None
    with Deadline() as scope:
        scope.bound(0.01)
        with pytest.raises(asyncio.CancelledError):
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                task.cancel()  # someone else's (the server's), requested before the bound's is taken back
                assert not scope.unbound()  # so the CancelledError is not the bound's to swallow
                raise
        assert task.cancelling() == 1  # the other request stands
        with pytest.raises(asyncio.CancelledError):
            await asyncio.sleep(0)  # and is delivered
        task.uncancel()
    assert not scope.expired


async def test_a_bound_moved_by_a_later_bound_is_timed_from_the_later_one() -> None:
    started = asyncio.get_running_loop().time()
    with Deadline() as scope:
        scope.bound(0.02)
        await asyncio.sleep(0)
        assert await _bounded_sleep(scope, 0.08, 5)  # the stretch re-bound: cut by its own limit
    assert 0.08 <= asyncio.get_running_loop().time() - started < 2  # not by the first bound's
    assert not scope.expired


async def test_a_lifted_bound_no_longer_counts_until_the_next_bound() -> None:
    with Deadline() as scope:
        scope.bound(0.02)
        await asyncio.sleep(0)
        scope.lift()  # the read came in: what follows (a send to a slow client) is not timed
        await asyncio.sleep(0.06)
        assert not scope.unbound()
        assert await _bounded_sleep(scope, 0.02, 5)  # the next bound counts again
    assert not scope.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


# --- Reads: a block of reads, bounded on the lender in its own task only ---------------------


async def _stuck_reads(idle: float, chunks: _Chunks | None = None) -> Reads:
    """A block whose second read never comes (the first within ``idle``)."""
    chunks = chunks or _Chunks()
    with reading(idle=idle) as reads:
        await reads.next(chunks)
        reads.done()
        await reads.next(chunks)
    return reads


class _Chunks:
    """One chunk at once, then nothing ever."""

    def __init__(self) -> None:
        self.given = 0

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        self.given += 1
        if self.given > 1:
            await asyncio.get_running_loop().create_future()
        return b"x"


async def test_reads_in_the_lenders_task_are_cut_by_its_timer_with_no_scope_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = counting_deadlines(monkeypatch)
    with _Lender() as lender:
        reads = await _stuck_reads(0.02)
        await asyncio.sleep(0)  # the lender's block goes on
    assert reads.expired and made == [] and not lender.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_reads_outside_a_lender_or_in_a_task_started_inside_it_use_a_scope_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = counting_deadlines(monkeypatch)
    assert (await _stuck_reads(0.02)).expired and len(made) == 1
    # A hedge's racer: it inherits the lender, but a bound on it would cancel the request's task.
    with _Lender() as lender:
        racer = asyncio.get_running_loop().create_task(_stuck_reads(0.02))
        assert (await racer).expired
    assert len(made) == 2 and not lender.expired


async def test_a_reads_block_lets_someone_elses_cancellation_through() -> None:
    chunks = _Chunks()

    async def read() -> Reads:
        with _Lender():
            return await _stuck_reads(30, chunks)

    task = asyncio.get_running_loop().create_task(read())
    await eventually(lambda: chunks.given == 2)  # in the read that never comes
    task.cancel()  # the client leaving, the server shutting down
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_reads_block_is_cut_by_its_own_limit_however_its_reads_go() -> None:
    with reading(0.02) as reads:
        await asyncio.get_running_loop().create_future()
    assert reads.expired


# --- the lending's API is the helper's alone ----------------------------------------------------

_PACKAGE = Path(deadlines.__file__).resolve().parent.parent
#: What bounds a read on a scope (a scope's methods), and what finds the scope to bound it on.
_BOUNDING = {"bound", "unbound", "lift"}
_FINDING = {"_bounding", "bounding", "_lender"}


def _uses_of_bounding(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in _BOUNDING | _FINDING:
            found.append(f"{path.relative_to(_PACKAGE.parent)}:{node.lineno} {node.attr}")
        if isinstance(node, ast.Name) and node.id in _FINDING:
            found.append(f"{path.relative_to(_PACKAGE.parent)}:{node.lineno} {node.id}")
        if isinstance(node, ast.keyword) and node.arg == "lends":
            found.append(f"{path.relative_to(_PACKAGE.parent)}:{node.value.lineno} lends=")
    return found


def test_no_module_but_the_helpers_own_bounds_a_read_and_only_the_requests_scope_lends() -> None:
    helper = _PACKAGE / "core" / "deadlines.py"
    uses = [use for path in sorted(_PACKAGE.rglob("*.py")) if path != helper for use in _uses_of_bounding(path)]
    # The request's listening scope is the one lender (its timer is the request's one timer).
    assert [use.split(":")[0] for use in uses] == ["asgi_router/inbound/disconnect.py"], uses
    assert uses[0].endswith("lends=")
    assert _uses_of_bounding(helper), "the scan no longer finds the helper's own uses"
