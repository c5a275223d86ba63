"""The git endpoint's gate on its own: a bound on git processes at once, pushes served before fetches."""

from __future__ import annotations

import asyncio

import pytest

from mergebot.git.gate import Busy, Gate


async def _hold(gate: Gate, name: str, push: bool, order: list[str], release: asyncio.Event,
                peak: list[int]) -> None:
    async with gate.slot(ahead=push, timeout=10):
        order.append(name)
        peak[0] = max(peak[0], gate.running)
        await release.wait()


class _Holders:
    """Tasks that each hold a slot of ``gate`` from their turn until let go; ``order`` is the order they got it in."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.order: list[str] = []
        self.done: dict[str, asyncio.Event] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, name: str, push: bool) -> None:
        self.done[name] = asyncio.Event()
        self.tasks.append(asyncio.create_task(_hold(self.gate, name, push, self.order, self.done[name], [0])))

    async def finish(self) -> list[str]:
        """Let every holder go; the gate ends empty. Returns the order the slots were given in."""
        for ev in self.done.values():
            ev.set()
        await asyncio.gather(*self.tasks)
        assert self.gate.running == 0 and self.gate.waiting == 0
        return self.order


def test_bound_and_order_pushes_first() -> None:
    async def main() -> tuple[list[str], int, int]:
        gate = Gate(2)
        order: list[str] = []
        peak = [0]
        release = asyncio.Event()
        tasks = [asyncio.create_task(_hold(gate, "fetch-a", False, order, release, peak)),
                 asyncio.create_task(_hold(gate, "fetch-b", False, order, release, peak))]
        await asyncio.sleep(0)
        assert order == ["fetch-a", "fetch-b"] and gate.running == 2
        # Two more fetches arrive, then two pushes: the pushes are served first, each kind in arrival order.
        for name, push in (("fetch-c", False), ("fetch-d", False), ("push-e", True), ("push-f", True)):
            tasks.append(asyncio.create_task(_hold(gate, name, push, order, release, peak)))
            await asyncio.sleep(0)
        assert gate.waiting == 4 and len(order) == 2
        release.set()
        await asyncio.gather(*tasks)
        return order, peak[0], gate.running

    order, peak, running = asyncio.run(main())
    assert order == ["fetch-a", "fetch-b", "push-e", "push-f", "fetch-c", "fetch-d"]
    assert peak == 2
    assert running == 0


def test_a_fetch_that_waited_its_patience_goes_before_later_pushes() -> None:
    """Pushes first, but not for ever: a stream of pushes cannot hold a fetch until the queue timeout."""
    async def main() -> list[str]:
        held = _Holders(Gate(1, patience=0.5))
        held.start("a", True)
        await asyncio.sleep(0)
        held.start("fetch", False)
        held.start("p1", True)
        await asyncio.sleep(0)
        held.done["a"].set()  # the fetch has hardly waited: the push goes first
        await asyncio.sleep(0.01)
        assert held.order == ["a", "p1"]
        await asyncio.sleep(0.6)  # now the fetch has waited longer than its patience
        held.start("p2", True)
        await asyncio.sleep(0)
        held.done["p1"].set()
        await asyncio.sleep(0.01)
        return await held.finish()

    assert asyncio.run(main()) == ["a", "p1", "fetch", "p2"]


def test_a_backlog_of_overdue_fetches_does_not_hold_a_push() -> None:
    """The head start is per waiter, not a class rank: a push keeps its place against fetches that have all
    waited past the patience, and goes before any fetch that arrived less than the patience before it."""
    async def main() -> list[str]:
        held = _Holders(Gate(1, patience=0.5))
        held.start("a", True)
        await asyncio.sleep(0)
        held.start("f1", False)  # t0
        await asyncio.sleep(0.2)
        held.start("push", True)  # t0 + 0.2: counts as t0 - 0.3
        await asyncio.sleep(0.7)
        held.start("f2", False)  # t0 + 0.9
        await asyncio.sleep(0.6)  # every waiter has now waited past the patience
        return await held.finish()

    assert asyncio.run(main()) == ["a", "push", "f1", "f2"]


def test_wait_times_out_as_busy_and_leaks_nothing() -> None:
    async def main() -> None:
        gate = Gate(1)
        release = asyncio.Event()
        holder = asyncio.create_task(_hold(gate, "a", True, [], release, [0]))
        await asyncio.sleep(0)
        with pytest.raises(Busy, match=r"no free git slot within 0\.05 s"):
            async with gate.slot(ahead=True, timeout=0.05):
                raise AssertionError("got a slot that was taken")
        assert gate.waiting == 0
        release.set()
        await holder
        assert gate.running == 0
        async with gate.slot(ahead=False, timeout=0.05):  # free again
            assert gate.running == 1

    asyncio.run(main())


def test_cancelled_waiter_gives_its_turn_on() -> None:
    async def main() -> list[str]:
        gate = Gate(1)
        order: list[str] = []
        release = asyncio.Event()
        first = asyncio.create_task(_hold(gate, "first", False, order, release, [0]))
        await asyncio.sleep(0)
        gone = asyncio.create_task(_hold(gate, "gone", True, order, release, [0]))
        last = asyncio.create_task(_hold(gate, "last", False, order, release, [0]))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        release.set()
        await asyncio.gather(first, last)
        assert gate.running == 0 and gate.waiting == 0
        return order

    assert asyncio.run(main()) == ["first", "last"]


def test_slot_handed_over_as_the_waiter_is_cancelled_is_passed_on() -> None:
    async def main() -> None:
        gate = Gate(1)
        release = asyncio.Event()
        order: list[str] = []
        release.set()
        async with gate.slot(ahead=False, timeout=1):
            unlucky = asyncio.create_task(_hold(gate, "unlucky", True, order, release, [0]))
            after = asyncio.create_task(_hold(gate, "after", False, order, release, [0]))
            await asyncio.sleep(0)
            assert gate.waiting == 2
        # Leaving the block handed the slot to "unlucky", which has not run yet; it is cancelled before it
        # does, so the slot must go on to "after" rather than be lost.
        unlucky.cancel()
        await asyncio.gather(unlucky, return_exceptions=True)
        await asyncio.wait_for(after, 5)
        assert order == ["after"]
        assert gate.running == 0

    asyncio.run(main())


def test_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        Gate(0)
