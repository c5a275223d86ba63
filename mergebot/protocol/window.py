"""The speculation window's steps in the protocol's model (``mergebot.protocol.model`` adds the rest of the protocol
to them): the fill, the runs, and what the leader does with each answer of the planner's ``decide``: land a prefix,
cut, judge a failed head, leave a suspect out of a failed run (rule 4a), judge a failed stretch apart (rule 4b), or
start the runs a tail or a bisection needs. The executor (``mergebot.landing.window.executor``) is not pure code, so
this is its part modelled by hand; the decisions are the planner's own (``decide``, ``joins``, ``closes``,
``batching``), with the push rules' ``judge_ref`` as the fence and the verdict policy's ``next_step`` for a verdict.

Each step is one method, so a planted bug (``mergebot.protocol.mutants``) replaces one of them.
"""

from __future__ import annotations

from collections.abc import Iterator

from mergebot.landing.intake.checks import RefUpdate, judge_ref
from mergebot.landing.judge import verdict
from mergebot.landing.window import planner
from mergebot.messages.refs import subtask_ref
from mergebot.models import Owner
from mergebot.models.judgement import Judged
from mergebot.protocol.state import (
    NEW_SHA,
    TARGET,
    Agent,
    Cand,
    Config,
    Intent,
    Slot,
    State,
    Step,
    Sub,
    Suspect,
    cand_name,
    fresh_serial,
    put,
    result,
)

# The estimates the model's candidates carry, and the window's measured failure rate (fixed: it sets how batches
# form, ``planner.batching``). Chosen so that two low estimates, or a low and a high one, form a batch of two (at this
# rate a batch must be 0.98^2 likely to pass), two high ones do not, and in a failed batch of a low and a high one
# the high one is the clear culprit (rule 4a) while two low ones name none (rule 4b).
RATE = 0.02
LOW = 0.01
HIGH = 0.025


class WindowSteps:
    """The window's half of ``Model``: its steps and the pure decisions they call."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()
        c = self.config
        self.batching = planner.batching(RATE, c.batch, c.window, c.risk_aware)

    # -- the pure decisions ----------------------------------------------------------------------------------------

    def fence(self, s: State, agent: int, sub: int, version: int) -> str | None:
        """Why a push (or a candidate) of ``agent`` for ``sub`` at claim ``version`` does not hold the claim: the
        push rules' refusal code, None when it holds."""
        row = s.subs[sub]
        owner = Owner(subtask_id=sub + 1, status=row.status, owner_id=row.owner + 1 if row.owner >= 0 else None,
                      claim_version=row.version, landing=row.landing)
        refusal = judge_ref(RefUpdate("0" * 40, NEW_SHA, subtask_ref(sub + 1, version)), agent + 1, TARGET, owner)
        return refusal.code if refusal is not None else None

    def holds(self, s: State, i: int) -> bool:
        c = s.cands[i]
        if c.reverts >= 0:  # the bot's revert: its own subtask, submitted by the bot, nobody else's to claim
            return True
        return self.fence(s, c.agent, c.sub, c.version) is None and not self.replaced(s, i)

    def replaced(self, s: State, i: int) -> bool:
        """Whether a newer push of its subtask made a candidate after ``i``: the subtask's ``candidate_sha`` is another
        commit (``candidate_unfenced``'s "replaced", SQL: modelled by hand)."""
        sub = s.cands[i].sub
        return s.cands[i].reverts < 0 and any(c.sub == sub and c.reverts < 0 for c in s.cands[i + 1:])

    def held_back(self, s: State, i: int) -> bool:
        """Whether candidate ``i``'s subtask depends on one that is not landed (its landing was reverted): the queue
        does not take it (``candidate_next``, SQL: modelled by hand) until that one lands again."""
        return s.cands[i].reverts < 0 and self.waits_on_revert(s, s.cands[i].sub)

    def waits_on_revert(self, s: State, t: int) -> bool:
        """Whether subtask ``t`` left ``blocked`` and depends on one that is not landed (a reverted landing)."""
        return s.subs[t].status != "blocked" and any(s.subs[on].status != "landed"
                                                     for d, on in self.config.depends if d == t)

    def risk(self, c: Cand) -> float:
        """A candidate's estimate as the planner sees it (``Speculation.risk``)."""
        return planner.PROVEN if c.proven else HIGH if c.risky else LOW

    def lane(self, sub: int) -> int:
        lanes = self.config.lanes
        return lanes[sub] if sub < len(lanes) else -1 - sub

    def plan(self, s: State, red: bool = False) -> planner.Decision:
        aware = self.config.risk_aware
        slots = [planner.Slot(sl.cand, sl.outcome or None, valid=self.holds(s, sl.cand), checkpoint=sl.checkpoint,
                              risk=self.risk(s.cands[sl.cand]) if aware else 0.0) for sl in s.window]
        pending = sum(sl.checkpoint and not sl.outcome for sl in s.window)
        return planner.decide(slots, free=max(0 if pending else 1, self.config.window - pending), red=red)

    def judge_failed(self) -> verdict.Step:
        """The verdict on a candidate that failed alone (on main, or on the very tree its failed run checked): its run
        failed, retries of failures are off, main's run passed."""
        runs = verdict.Runs(first=Judged.as_run(result("fail")), base=result("pass"))
        return verdict.next_step(runs, retry_failures=False)

    # -- the fill and the runs ---------------------------------------------------------------------------------------

    def busy(self, s: State, i: int) -> bool:
        """Whether candidate ``i`` touches what a left-out suspect touches (its lane): it waits for that verdict."""
        lane = self.lane(s.cands[i].sub)
        return any(self.lane(s.cands[sp.cand].sub) == lane for sp in s.suspects)

    def next_cand(self, s: State) -> int | None:
        """The queue's first seen candidate the fill may take (one in a suspect's lane is deferred, passed over)."""
        for i, c in enumerate(s.cands):
            if c.status == "queued" and c.heard == "seen" and not self.held_back(s, i) and \
                    (not self.holds(s, i) or not self.busy(s, i)):
                return i
        return None

    def fill(self, s: State) -> Iterator[Step]:
        """The window takes the queue's next candidate onto its chain (one that no longer holds its fence is cut
        instead) while it holds fewer runs than its width: into the batch at the chain's tail while ``joins`` lets
        it, a run on it when ``closes`` says, or when the queue has run dry."""
        if s.stage or len([sl for sl in s.window if sl.checkpoint]) >= self.config.window or \
                any(sl.outcome == "fail" for sl in s.window):
            return
        i = self.next_cand(s)
        if i is None:
            return
        if not self.holds(s, i):
            yield f"{cand_name(s, i)} no longer holds its claim: cut", self._drop(s, i, "cut")
            return
        tail = self.unchecked(s)
        risks = [self.risk(s.cands[sl.cand]) for sl in tail]
        if not planner.joins(risks, self.risk(s.cands[i]), self.batching):
            s = self._run_on(s, len(s.window) - 1)
            if len([sl for sl in s.window if sl.checkpoint]) >= self.config.window:
                yield "the batch at the chain's tail gets its run first: the window is full", s
                return
            risks = []
        c = s.cands[i]
        nxt = put(self._cand(s, i, put(c, status="window")), window=(*s.window, Slot(i, checkpoint=False)),
                      base=s.base if s.window else s.main)
        if planner.closes([*risks, self.risk(c)], self.batching) or self.next_cand(nxt) is None:
            nxt = self._run_on(nxt, len(nxt.window) - 1)
        yield f"the window takes {cand_name(s, i)}{'' if nxt.window[-1].checkpoint else ' (no run yet)'}", nxt

    def unchecked(self, s: State) -> tuple[Slot, ...]:
        """The slots at the chain's tail no run covers yet."""
        k = len(s.window)
        while k and not s.window[k - 1].checkpoint:
            k -= 1
        return s.window[k:]

    def run(self, s: State) -> Iterator[Step]:
        for k, slot in enumerate(s.window):
            if slot.checkpoint and not slot.outcome:
                ok = all(s.cands[sl.cand].good for sl in s.window[:k + 1])
                nxt = self._orphans(put(s, window=(*s.window[:k], put(slot, outcome="pass" if ok else "fail"),
                                                   *s.window[k + 1:])))
                back = "".join(f"; suspect {sp.cand + 1} goes back to the queue" for sp in s.suspects
                               if sp not in nxt.suspects)
                yield f"the run of slot {k + 1} ({cand_name(s, slot.cand)}) {'passes' if ok else 'fails'}{back}", nxt

    # -- the planner's answers ---------------------------------------------------------------------------------------

    def decide(self, s: State) -> Iterator[Step]:
        if not s.window or s.stage:
            return
        d = self.plan(s)
        if d.action == "land":
            yield self.begin_landing(s, d.index)
        elif d.action == "cut":
            names = ", ".join(str(sl.cand + 1) for sl in s.window[d.index:])
            nxt = s
            for sl in s.window[d.index:]:
                nxt = self._drop(nxt, sl.cand, "queued" if self.holds(s, sl.cand) else "cut")
            yield f"the planner cuts the window from slot {d.index + 1} (candidates {names})", self._orphans(nxt)
        elif d.action == "judge_head":
            yield self.judge_head(s)
        elif d.action == "leave_out":
            yield self.leave_out(s, d.index)
        elif d.action == "apart":
            yield self.apart(s, d.index)
        elif d.action == "checkpoint":
            nxt = s
            for k in (d.index, *d.more):
                nxt = self._run_on(nxt, k)
            yield f"the planner starts a run on slot {', '.join(str(k + 1) for k in (d.index, *d.more))}", nxt
        elif d.action != "wait":  # "alone" needs a red main or a serial window (one wide, batches of one)
            raise NotImplementedError(d.action)

    def begin_landing(self, s: State, upto: int) -> Step:
        members = tuple(sl.cand for sl in s.window[:upto + 1])
        serial = fresh_serial(s)
        intent = Intent(serial, members, s.base, (*s.base, *((i, serial) for i in members)),
                        proven=s.window[upto].outcome == "pass")
        nxt = put(s, intents=(*s.intents, intent), window=s.window[upto + 1:], base=intent.new,
                      stage="intent")
        for i in members:
            c = nxt.cands[i]
            nxt = self._cand(nxt, i, put(c, status="landing"))
            if c.reverts < 0:  # a revert's subtask is the bot's own
                nxt = self._sub(nxt, c.sub, put(nxt.subs[c.sub], landing=True))
        return f"the planner lands candidates {', '.join(str(i + 1) for i in members)}: intent written", nxt

    def judge_head(self, s: State) -> Step:
        i = s.window[0].cand
        nxt = put(s, window=s.window[1:])
        nxt, kind = self._reject(put(nxt, base=nxt.base if nxt.window else ()), i)
        return f"{cand_name(s, i)} failed alone: rejected ({kind}), its agent is told", self._orphans(nxt)

    def leave_out(self, s: State, at: int) -> Step:
        """Rule 4a (``Speculator._leave_out``): the suspect leaves the chain, keeping its failed run; the slots behind
        it are merged again without it (no run yet), except those in its lane, which wait for its verdict; the rest
        gets a run of its own (unless it has one pending). With nothing left ahead of it, it goes back to the queue."""
        sus, failed = s.window[at].cand, [sl.cand for sl in s.window]
        window = list(s.window[:at])
        nxt = s
        for sl in s.window[at + 1:]:
            if self.waits(s, sl.cand, sus):
                nxt = self._requeue(nxt, sl.cand)
            else:
                window.append(Slot(sl.cand, checkpoint=False))
        what = f"the planner leaves {cand_name(s, sus)} out of its failed run"
        if not window:
            nxt = self._requeue(put(nxt, window=(), base=()), sus)
            return f"{what}; nothing is left ahead of it: back to the queue", self._orphans(nxt)
        if not window[-1].checkpoint:
            window[-1] = put(window[-1], checkpoint=True)
        tree = tuple(sorted({c for c, _ in s.base} | set(failed)))
        suspect = Suspect(sus, window[-1].cand, tree, tuple(sl.cand for sl in s.window[:at]))
        nxt = put(nxt, window=tuple(window), suspects=(*nxt.suspects, suspect))
        return f"{what}; the run of {cand_name(s, window[-1].cand)} covers the rest", self._orphans(nxt)

    def apart(self, s: State, lo: int) -> Step:
        """Rule 4b (``apart.stretch``): the failed stretch leaves the chain and each of its candidates is judged on
        main alone (at once, here): a failing one is rejected, a passing one goes back to the queue as proven."""
        nxt = put(s, window=s.window[:lo], base=s.base if lo else ())
        for sl in s.window[lo:]:
            c = nxt.cands[sl.cand]
            if not c.good:
                nxt, _ = self._reject(nxt, sl.cand)
            elif self.holds(nxt, sl.cand):
                nxt = self._cand(nxt, sl.cand, put(c, status="queued", proven=True))
            else:
                nxt = self._drop(nxt, sl.cand, "cut")
        names = ", ".join(str(sl.cand + 1) for sl in s.window[lo:])
        return f"the planner judges candidates {names} apart on main: the bad one is rejected", self._orphans(nxt)

    def waits(self, s: State, i: int, sus: int) -> bool:
        """Whether candidate ``i``, behind suspect ``sus`` in the chain, waits for its verdict: it is in its lane."""
        return self.lane(s.cands[i].sub) == self.lane(s.cands[sus].sub)

    def judge_suspects(self, s: State, landed: tuple[int, ...]) -> State:
        """``Speculator._suspects_after``: a suspect whose rest landed is judged on its failed run when its merge on
        the new main is the tree that failed, else goes back to the queue."""
        for sp in [sp for sp in s.suspects if sp.rest in landed]:
            s = put(s, suspects=tuple(x for x in s.suspects if x != sp))
            if tuple(sorted({c for c, _ in s.main} | {sp.cand})) == sp.tree:
                s, _ = self._reject(s, sp.cand)
            else:
                s = self._requeue(s, sp.cand)
        return s

    def crosses(self, s: State, landed: tuple[int, ...]) -> bool:
        """Whether one of ``landed`` is in the lane of a suspect it was not ahead of (the ghost ``State.crossed``)."""
        return any(self.lane(s.cands[i].sub) == self.lane(s.cands[sp.cand].sub) and i not in sp.ahead
                   and i != sp.cand for sp in s.suspects for i in landed)

    # -- small helpers -----------------------------------------------------------------------------------------------

    def _run_on(self, s: State, k: int) -> State:
        return put(s, window=(*s.window[:k], put(s.window[k], checkpoint=True), *s.window[k + 1:]))

    def _reject(self, s: State, i: int) -> tuple[State, str]:
        """Candidate ``i`` rejected by the verdict policy; its agent is told and keeps its claim."""
        step = self.judge_failed()
        if step.action != "reject":
            raise NotImplementedError(step.action)
        c = s.cands[i]
        s = self._cand(s, i, put(c, status="rejected", told="rejected"))
        sub = s.subs[c.sub]
        if sub.status == "submitted" and sub.owner == c.agent and sub.version == c.version and not self.replaced(s, i):
            s = self._sub(s, c.sub, put(sub, status="running"))  # ``subtask_reject`` is fenced by the commit too
        return self._tell(s, i, keep=True), step.kind

    def _requeue(self, s: State, i: int) -> State:
        c = s.cands[i]
        return self._cand(s, i, put(c, status="queued")) if c.status == "window" else s

    def _orphans(self, s: State) -> State:
        """Suspects whose rest failed or left the window (a cut, a roll-back) go back to the queue: the culprit may
        be elsewhere."""
        live = {sl.cand for sl in s.window if sl.outcome != "fail"}
        if s.stage and s.intents:
            live |= set(s.intents[-1].cands)
        for sp in [sp for sp in s.suspects if sp.rest not in live]:
            s = self._requeue(put(s, suspects=tuple(x for x in s.suspects if x != sp)), sp.cand)
        return s

    @staticmethod
    def _agent(s: State, a: int, g: Agent) -> State:
        return put(s, agents=(*s.agents[:a], g, *s.agents[a + 1:]))

    @staticmethod
    def _sub(s: State, t: int, sub: Sub) -> State:
        return put(s, subs=(*s.subs[:t], sub, *s.subs[t + 1:]))

    @staticmethod
    def _cand(s: State, i: int, c: Cand) -> State:
        return put(s, cands=(*s.cands[:i], c, *s.cands[i + 1:]))

    def _drop(self, s: State, i: int, status: str) -> State:
        """Candidate ``i`` leaves the window (if it is in it) for ``status``: back to the queue, or cut for good."""
        window = tuple(sl for sl in s.window if sl.cand != i)
        c = s.cands[i]
        if c.status == "landed":  # another leader's landing took it: it stays landed (``candidate_finish``)
            return put(s, window=window, base=s.base if window else ())
        if status == "cut" and self.replaced(s, i):  # a newer push replaced it: its agent waits for that one
            status = "superseded"
        s = put(self._cand(s, i, put(c, status=status)), window=window, base=s.base if window else ())
        return self._tell(s, i, keep=False) if status == "cut" else s

    def _clear_window(self, s: State) -> State:
        """The whole window goes back to the queue, its suspects too (they are in no slot a cut would requeue, but
        their rest is gone)."""
        for i in [sl.cand for sl in s.window] + [sp.cand for sp in s.suspects]:
            s = self._cand(s, i, put(s.cands[i], status="queued"))
        return put(s, window=(), base=(), suspects=())

    def _tell(self, s: State, i: int, *, keep: bool) -> State:
        """The agent, if it still believes in the claim and this is its last push, hears the verdict: keeps the claim
        (a rejection) or not."""
        c = s.cands[i]
        g = s.agents[c.agent]
        if c.reverts < 0 and g.task == c.sub and g.version == c.version and not self.replaced(s, i):
            return self._agent(s, c.agent, put(g, waiting=False) if keep else Agent())
        return s
