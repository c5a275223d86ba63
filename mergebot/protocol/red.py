"""A red main and its mending in the protocol's model (``Config.breaks`` above 0; ``mergebot.protocol.model`` adds
these steps to the rest): a landed change breaks main's own check though its candidate's check passed (main's check
is another command, so the landing's run does not answer for main: ``verdict.post_land_covered``), the post-land check
finds main red (``verdict.main_change``), the mend bisects the landings since main was last green
(``mend.next_probe``) and queues the culprit's revert first; while main is red the window judges one candidate at a
time against main itself (the planner's ``decide`` with ``red=True`` answers ``alone``; the verdict policy's
``next_step``, with ``base_source`` for main's status, lands it or parks it). The revert lands through the same
intent and compare-and-swap as any candidate; its landed row sends the culprit's subtask back to its owner at a new
claim version, and the queue holds the subtasks that depend on it until it lands again; the revert's post-land check
turns main green and the parked candidates are queued again.

What is pure code is called (``postland``'s and ``mend``'s decisions above); what is not is modelled by hand: the
post-land check's runs and ``mend.confirm`` (the check again on the same commit: the break is main's check's, so it
fails again), ``mend._mend``'s walk over the suspects, ``queue_revert`` (once per culprit), ``subtask_send_back``
and ``candidate_next``'s hold (SQL), and ``Speculator.alone``. A post-land check and its mend are one step here.
"""

from __future__ import annotations

from collections.abc import Iterator

from mergebot.landing.judge import verdict
from mergebot.landing.main import mend
from mergebot.models.judgement import Judged
from mergebot.protocol.state import NEW_SHA, Agent, Cand, Config, History, Slot, State, Step, cand_name, put, result
from mergebot.protocol.window import WindowSteps

CHECK, MAIN_CHECK = "check", "main-check"  # the candidates' check command, and main's own when a change may break it
RED_SHA = "2" * 40  # main's commit as ``red_since`` names it (only whether one is set matters to the model)


class RedSteps(WindowSteps):
    """Post-land checks, a red main, its mend, and the window while main is red."""

    def __init__(self, config: Config | None = None) -> None:
        super().__init__(config)
        main_check = MAIN_CHECK if self.config.breaks else CHECK
        # whether a landing gets a post-land run of its own: not when its passing run is main's check already
        self.postland = not verdict.post_land_covered(rerun=False, landed_result="pass", landed_command=CHECK,
                                                      command=main_check)

    # -- main's check ----------------------------------------------------------------------------------------------

    @staticmethod
    def head(s: State, rows: int) -> History:
        """Main's commit once the landed row ``rows`` (counted from 1) was written: through its candidate's merge."""
        i = s.landed[rows - 1]
        k = max(j for j, (c, _) in enumerate(s.main) if c == i)
        return s.main[:k + 1]

    @staticmethod
    def passes(s: State, commit: History) -> bool:
        """Main's own check on ``commit``: it fails while a change that breaks it is there and not reverted."""
        on = [c for c, _ in commit if c >= 0]
        undone = {s.cands[c].reverts for c in on}
        return not any(s.cands[c].breaks and c not in undone for c in on)

    def post_land(self, s: State) -> Iterator[Step]:
        """The post-land check of the newest landing (a newer landing's replaces an older one not yet run), and what
        ``verdict.main_change`` makes of it: main green again (the parked candidates queued), red (confirmed by a
        second run, then mended), or nothing."""
        if not (self.postland and s.check and s.up):
            return
        rows = s.check
        ok = self.passes(s, self.head(s, rows))
        change = verdict.main_change(passed=ok, red=bool(s.red), red_here=s.red == rows)
        nxt = put(s, check=0, green=rows if ok else s.green)
        what = f"the post-land check of landed row {rows} {'passes' if ok else 'fails'} on main"
        if change == "green":
            cands = tuple(put(c, status="queued") if c.status == "parked" else c for c in s.cands)
            yield f"{what}: main is green again, the parked candidates are queued", put(nxt, red=0, cands=cands)
        elif change == "red":
            nxt, mended = self.mend(put(nxt, red=s.red or rows), rows)
            yield f"{what}, and again (not flaky): main is red, the queue judges alone; {mended}", nxt
        else:
            yield f"{what}{' (main is red already)' * (not ok)}", nxt

    def mend(self, s: State, rows: int) -> tuple[State, str]:
        """``mend._mend``: the first red landing since main was last green, found by bisection (``next_probe``; each
        probe's row records its outcome), its revert queued first, once per culprit; or the mend gives up (main stays
        red until a person acts)."""
        suspects = s.landed[s.green:rows]
        if not suspects or any(s.cands[i].reverts >= 0 for i in suspects):
            return s, "the mend gives up: main stays red"
        lo, green = self.bisect(s, len(suspects))
        culprit = suspects[lo]
        s = put(s, green=green)
        if any(c.reverts == culprit for c in s.cands):  # ``queue_revert``'s idempotency key: the first one stands
            return s, f"the revert of candidate {culprit + 1} is queued already"
        c = s.cands[culprit]
        revert = Cand(c.sub, c.version, c.agent, good=True, reverts=culprit)
        return put(s, cands=(*s.cands, revert)), f"the bot queues candidate {len(s.cands) + 1}, the revert of " \
                                                   f"candidate {culprit + 1}, first"

    def bisect(self, s: State, n: int) -> tuple[int, int]:
        """The first red of the ``n`` landings since main was last green (``next_probe`` picks each probe), and the
        landed rows main's check has now passed through (a probe that passes records it)."""
        lo, hi, green = 0, n - 1, s.green
        while (mid := mend.next_probe(lo, hi)) is not None:
            if self.passes(s, self.head(s, s.green + mid + 1)):
                lo, green = mid + 1, s.green + mid + 1
            else:
                hi = mid
        return lo, green

    # -- the window while main is red ---------------------------------------------------------------------------

    def take(self, s: State) -> int | None:
        """``candidate_next``: the bot's reverts first (their priority), then the queue's next candidate."""
        for i, c in enumerate(s.cands):
            if c.reverts >= 0 and c.status == "queued":
                return i
        return self.next_cand(s)

    def alone(self, s: State) -> Iterator[Step]:
        """Planner rule 0 (``Speculator.alone``): main is red, so whatever the window holds goes back to the queue
        and the next candidate is merged onto main and judged there alone: landed (its intent written) when its
        check passes, else parked, as the verdict policy says with main known red."""
        if not s.red or s.stage:
            return
        d = self.plan(s, red=True)
        if d.action != "alone":
            raise NotImplementedError(d.action)
        nxt = self._clear_window(s)
        i = self.take(nxt)
        if i is None:
            if s.window or s.suspects:
                yield "main is red: the window goes back to the queue", nxt
            return
        if not self.holds(nxt, i):
            yield f"{cand_name(s, i)} no longer holds its claim: cut", self._drop(nxt, i, "cut")
            return
        c = nxt.cands[i]
        runs = verdict.Runs(first=Judged.as_run(result("pass" if c.good else "fail")))
        step = verdict.next_step(runs, retry_failures=False)
        if step.action == "base":
            known = verdict.base_source(red_since=RED_SHA, main=RED_SHA, merged_sha=NEW_SHA) == "known_red"
            runs = verdict.Runs(runs.first, base=result("fail" if known else "pass"))
            step = verdict.next_step(runs, retry_failures=False)
        what = f"main is red: {cand_name(s, i)} is judged alone on main"
        if step.action == "land":
            nxt = put(self._cand(nxt, i, put(c, status="window")), window=(Slot(i, "pass"),), base=nxt.main)
            name, nxt = self.begin_landing(nxt, 0)
            yield f"{what} and passes; {name}", nxt
        elif step.action == "park":
            yield f"{what}, fails, and main fails too: parked", self._cand(nxt, i, put(c, status="parked"))
        else:
            raise NotImplementedError(step.action)

    # -- the revert's landing ------------------------------------------------------------------------------------

    def send_back(self, s: State, i: int) -> State:
        """``subtask_send_back``, in the transaction that writes revert ``i``'s landed row: the culprit's subtask,
        still landed at the culprit's claim, runs again for its owner at a new claim version (its owner takes it up
        when it holds no other claim; otherwise nobody heartbeats it and its lease runs out)."""
        culprit = s.cands[s.cands[i].reverts]
        t, sub = culprit.sub, s.subs[culprit.sub]
        if sub.status != "landed" or sub.version != culprit.version:
            return s
        v = sub.version + 1
        s = self._sub(s, t, put(sub, status="running", owner=culprit.agent, version=v))
        if s.agents[culprit.agent].task < 0:
            s = self._agent(s, culprit.agent, Agent(task=t, version=v))
        return s
