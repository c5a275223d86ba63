"""The landing protocol as a small explicit-state system (``docs/protocol.md`` tells it in prose).

``Model.steps`` lists every step enabled in a ``State`` (``mergebot.protocol.state``, immutable), each as ``(name,
next state)``, the name a sentence a trace prints. Where the decision is already pure code the step calls it, never
a copy: the push rules' ``judge_ref`` (a push, and a candidate's fence), the planner's ``decide`` (what the window
does next), the verdict policy's ``next_step`` (a failed head) and the reconciler's ``settle`` (a pending intent).
Each step is one method, so a planted bug (``mergebot.protocol.mutants``) is a subclass that replaces one. A second
replica appears only as a take-over (``Config.takeovers``: the leader's lock goes mid-landing, the other leads and
reconciles, and the old leader carries its landing on as the real code would; ``docs/protocol.md``, "Findings").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from mergebot.landing.intake.checks import RefUpdate, judge_ref
from mergebot.landing.judge import verdict
from mergebot.landing.main.reconcile import settle
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
    History,
    Intent,
    Slot,
    State,
    Step,
    Sub,
    cand_name,
    fresh_serial,
    newest,
    on_main,
    result,
)


class Model:
    """The protocol's steps over ``State``; ``mergebot.protocol.mutants`` replaces one step at a time."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config()

    # -- the start, and names ----------------------------------------------------------------------------------

    def initial(self) -> State:
        c = self.config
        blocked = {d for d, _ in c.depends}
        return State(subs=tuple(Sub("blocked" if i in blocked else "ready") for i in range(c.subtasks)),
                     agents=tuple(Agent() for _ in range(c.agents)))

    # -- the pure decisions the model calls ----------------------------------------------------------------------

    def fence(self, s: State, agent: int, sub: int, version: int) -> str | None:
        """Why a push (or a candidate) of ``agent`` for ``sub`` at claim ``version`` does not hold the claim: the
        push rules' refusal code, None when it holds."""
        row = s.subs[sub]
        owner = Owner(subtask_id=sub + 1, status=row.status, owner_id=row.owner + 1 if row.owner >= 0 else None,
                      claim_version=row.version, landing=row.landing)
        refusal = judge_ref(RefUpdate("0" * 40, NEW_SHA, subtask_ref(sub + 1, version)), agent + 1, TARGET, owner)
        return refusal.code if refusal is not None else None

    def holds(self, s: State, i: int) -> bool:
        """Whether candidate ``i`` holds its fence: the push rules' fence, and (as ``candidate_unfenced``, SQL the
        model mirrors here) its subtask submitted on exactly its commit, the newest push."""
        c = s.cands[i]
        return (self.fence(s, c.agent, c.sub, c.version) is None and s.subs[c.sub].status == "submitted"
                and newest(s, i))

    def compare(self, main: History, old: History) -> bool:
        """The compare of the compare-and-swap that moves main."""
        return main == old

    def plan(self, s: State) -> planner.Decision:
        slots = [planner.Slot(sl.cand, sl.outcome or None, valid=self.holds(s, sl.cand)) for sl in s.window]
        return planner.decide(slots, free=1)

    def judge_failed(self) -> verdict.Step:
        """The verdict on a head that failed alone: its run failed, retries of failures are off, main's run passed."""
        runs = verdict.Runs(first=Judged.as_run(result("fail")), base=result("pass"))
        return verdict.next_step(runs, retry_failures=False)

    # -- the steps -------------------------------------------------------------------------------------------------

    def steps(self, s: State) -> Iterator[Step]:
        """Every step enabled in ``s``."""
        for name, nxt in self._all(s):
            yield name, replace(nxt, reconciled=False) if nxt.reconciled and s.up else nxt

    def _all(self, s: State) -> Iterator[Step]:
        if not s.up:  # whatever else happens while the server is down happens as well just after its restart
            yield from self.restart(s)
            return
        for a in range(len(s.agents)):
            yield from self.agent_steps(s, a)
        for t in range(len(s.subs)):
            yield from self.expire(s, t)
        yield from self.forge_push(s)
        if not (s.old and self.held(s, s.old[0])):  # the new leader's reconciler waits on the old one's intent
            yield from self.sweep(s)
            yield from self.fill(s)
            yield from self.run(s)
            yield from self.decide(s)
            yield from self.move_main(s)
            yield from self.finish_step(s)
        yield from self.crash(s)
        yield from self.take_over(s)
        yield from self.old_leader(s)

    # agents

    def agent_steps(self, s: State, a: int) -> Iterator[Step]:
        g, c = s.agents[a], self.config
        if g.silent:
            yield f"agent {a + 1} comes back", self._agent(s, a, replace(g, silent=False))
            return
        if g.task >= 0 and not g.waiting:  # only a claim's lease hangs on its heartbeats
            yield f"agent {a + 1} goes silent", self._agent(s, a, replace(g, silent=True))
        if g.task < 0:
            for t, sub in enumerate(s.subs):
                if sub.status == "ready" and sub.version < c.versions:
                    v = sub.version + 1
                    nxt = self._sub(s, t, replace(sub, status="running", owner=a, version=v))
                    yield (f"agent {a + 1} claims subtask {t + 1} (claim version {v})",
                           self._agent(nxt, a, Agent(task=t, version=v)))
        elif s.pushes < c.pushes:  # waiting for a verdict, it may push again: the newer push supersedes
            for good in (True, False):
                if not good and s.bad >= c.bad:
                    continue
                yield from self.push(s, a, good)

    def push(self, s: State, a: int, good: bool) -> Iterator[Step]:
        """A push, judged by the push rules; a queued candidate's NOTIFY reaches the leader, or is lost."""
        g = s.agents[a]
        what = f"agent {a + 1} pushes a {'good' if good else 'bad'} change to subtask {g.task + 1} v{g.version}"
        s = replace(s, pushes=s.pushes + 1, bad=s.bad + (not good))
        code = self.fence(s, a, g.task, g.version)
        if code is not None:
            yield f"{what}: refused ({code}), it lets the subtask go", self._agent(s, a, Agent())
            return
        for i, c in enumerate(s.cands):  # ``candidates_supersede``: the older ones still queued are superseded
            if c.sub == g.task and c.status == "queued":
                s = self._cand(s, i, replace(c, status="superseded"))
        for heard in ("seen", "lost"):
            if heard == "lost" and s.lost >= self.config.lost:
                continue
            cand = Cand(g.task, g.version, a, good, heard=heard)
            nxt = replace(s, cands=(*s.cands, cand), lost=s.lost + (heard == "lost"))
            nxt = self._sub(nxt, g.task, replace(s.subs[g.task], status="submitted"))
            said = "its NOTIFY is lost" if heard == "lost" else "the leader hears its NOTIFY"
            yield (f"{what}: queued as candidate {len(s.cands) + 1}, {said}",
                   self._agent(nxt, a, replace(g, waiting=True)))

    def expire(self, s: State, t: int) -> Iterator[Step]:
        """The recovery loop hands back a running subtask whose owner went silent (its lease ran out)."""
        sub = s.subs[t]
        if sub.status == "running" and s.agents[sub.owner].silent:
            yield (f"the lease of agent {sub.owner + 1} on subtask {t + 1} expires: the subtask is ready again",
                   self._sub(s, t, replace(sub, status="ready", owner=-1)))

    def forge_push(self, s: State) -> Iterator[Step]:
        if s.forged < self.config.forge:
            n = s.forged + 1
            yield f"someone pushes commit F{n} to the forge's main", replace(s, main=(*s.main, (-n, 0)), forged=n)

    def sweep(self, s: State) -> Iterator[Step]:
        unheard = [i for i, c in enumerate(s.cands) if c.status == "queued" and c.heard != "seen"]
        if unheard:
            yield "the sweep finds the queue's unseen candidates", self._seen(s)

    def fill(self, s: State) -> Iterator[Step]:
        """The window takes the queue's first seen candidate; one that no longer holds its fence is cut instead."""
        if len(s.window) >= self.config.window or s.stage:
            return
        for i, c in enumerate(s.cands):
            if c.status == "queued" and c.heard == "seen":
                if not self.holds(s, i):
                    yield f"{cand_name(s, i)} no longer holds its claim: cut", self._drop(s, i, "cut")
                    return
                base = s.base if s.window else s.main
                nxt = replace(self._cand(s, i, replace(c, status="window")), window=(*s.window, Slot(i)), base=base)
                yield f"the window takes {cand_name(s, i)}", nxt
                return

    def run(self, s: State) -> Iterator[Step]:
        for k, slot in enumerate(s.window):
            if not slot.outcome:
                members = [sl.cand for sl in s.window[:k + 1]]
                ok = all(s.cands[i].good for i in members)
                window = (*s.window[:k], replace(slot, outcome="pass" if ok else "fail"), *s.window[k + 1:])
                yield (f"the run of slot {k + 1} ({cand_name(s, slot.cand)}) {'passes' if ok else 'fails'}",
                       replace(s, window=window))

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
            yield f"the planner cuts the window from slot {d.index + 1} (candidates {names})", nxt
        elif d.action in ("judge_head", "alone"):
            yield self.judge_head(s)
        elif d.action != "wait":
            raise NotImplementedError(d.action)

    def begin_landing(self, s: State, upto: int) -> Step:
        members = tuple(sl.cand for sl in s.window[:upto + 1])
        serial = fresh_serial(s)
        intent = Intent(serial, members, s.base, (*s.base, *((i, serial) for i in members)),
                        proven=s.window[upto].outcome == "pass")
        nxt = replace(s, intents=(*s.intents, intent), window=s.window[upto + 1:], base=intent.new,
                      stage="intent")
        for i in members:
            c = nxt.cands[i]
            nxt = self._cand(nxt, i, replace(c, status="landing"))
            nxt = self._sub(nxt, c.sub, replace(nxt.subs[c.sub], landing=True))
        return f"the planner lands candidates {', '.join(str(i + 1) for i in members)}: intent written", nxt

    def judge_head(self, s: State) -> Step:
        i = s.window[0].cand
        step = self.judge_failed()
        if step.action != "reject":
            raise NotImplementedError(step.action)
        c = s.cands[i]
        nxt = replace(self._cand(s, i, replace(c, status="rejected", told="rejected")), window=s.window[1:])
        if not nxt.window:
            nxt = replace(nxt, base=())
        sub = nxt.subs[c.sub]
        if sub.status == "submitted" and sub.owner == c.agent and sub.version == c.version and newest(s, i):
            # ``subtask_reject`` is fenced by the commit too: a newer push is not bounced for an older one
            nxt = self._sub(nxt, c.sub, replace(sub, status="running"))
        nxt = self._tell(nxt, i, keep=True)
        return f"{cand_name(s, i)} failed alone: rejected ({step.kind}), its agent is told", nxt

    def move_main(self, s: State) -> Iterator[Step]:
        if s.stage != "intent":
            return
        intent = s.intents[-1]
        if self.compare(s.main, intent.old):
            yield "main moves by compare-and-swap to the intent's commit", replace(
                s, main=intent.new, stage="moved", unproven=s.unproven or not intent.proven)
        else:
            nxt = self.roll_back(s, intent)
            yield "main moved under the landing: the compare-and-swap fails and the intent is rolled back", \
                self._clear_window(replace(nxt, stage=""))

    def finish_step(self, s: State) -> Iterator[Step]:
        if s.stage == "moved":
            yield "the landed rows are written, dependents released, the intent finished", replace(
                self.finish(s, s.intents[-1]), stage="")

    def take_over(self, s: State) -> Iterator[Step]:
        """The leader's lock goes (its session died) while its landing is in flight; the other replica takes the
        lock and, as a new leadership does, reconciles before its queue moves. The old one does not know yet: it
        checks its leadership between passes, not inside a landing."""
        if s.stage and not s.old and s.takeovers < self.config.takeovers:
            old = replace(s, old=(s.intents[-1],), old_stage=s.stage, stage="", takeovers=s.takeovers + 1)
            nxt = self.reconcile_intents(self._clear_window(old))
            yield "the leader loses its lock mid-landing; the other replica leads and reconciles", self._seen(nxt)

    def old_leader(self, s: State) -> Iterator[Step]:
        """The replica that lost its lock finishes the landing it had begun, as the real code would: it locks its
        intent's row first (``LandingStore.settling``) and stops if the new leader settled it."""
        if not s.old:
            return
        intent = s.old[0]
        done = replace(s, old=(), old_stage="")
        if s.old_stage == "intent" and self.settled(s, intent):
            yield "the old leader finds its intent settled by the new leader: it stops", done
        elif s.old_stage == "intent":
            if self.compare(s.main, intent.old):
                yield "the old leader's compare-and-swap moves main to its intent's commit", replace(
                    s, main=intent.new, old_stage="moved", unproven=s.unproven or not intent.proven)
            else:
                yield "the old leader's compare-and-swap fails: it rolls its intent back", self.roll_back(done, intent)
        else:
            yield "the old leader writes its landed rows", self.finish_fenced(done, intent)

    def crash(self, s: State) -> Iterator[Step]:
        if s.crashes < self.config.crashes:
            yield "the server crashes", replace(s, up=False, window=(), base=(), stage="", crashes=s.crashes + 1)

    def restart(self, s: State) -> Iterator[Step]:
        nxt = self.reconcile_intents(s)
        for i, c in enumerate(nxt.cands):
            if c.status == "window":  # caught mid-verification: back to the queue
                nxt = self._cand(nxt, i, replace(c, status="queued"))
        yield "the server restarts; the reconciler runs", replace(self._seen(nxt), up=True, reconciled=True)

    # -- the landing's parts, each a database transaction ---------------------------------------------------------

    def settled(self, s: State, intent: Intent) -> bool:
        """Whether another leader settled ``intent`` (its row, locked, is no longer pending)."""
        return intent not in s.intents

    def held(self, s: State, intent: Intent) -> bool:
        """Whether the old leader holds ``intent``'s row locked (past its compare-and-swap): the reconciler waits."""
        return bool(s.old) and s.old[0] == intent and s.old_stage == "moved"

    def reconcile_intents(self, s: State) -> State:
        for intent in s.intents:
            if self.held(s, intent):
                continue
            choice = settle(on_main(intent.new, s.main))
            s = self.finish(s, intent) if choice == "finish" else self.roll_back(s, intent)
        return s

    def finish(self, s: State, intent: Intent) -> State:
        """One transaction: the landed rows, the subtasks landed, their dependents released, the intent closed."""
        s = replace(s, landed=(*s.landed, *intent.cands), intents=tuple(x for x in s.intents if x != intent))
        for i in intent.cands:
            c = s.cands[i]
            s = self._cand(s, i, replace(c, status="landed", told="landed"))
            s = self._sub(s, c.sub, replace(s.subs[c.sub], status="landed", owner=-1, landing=False))
            s = self._tell(s, i, keep=False)
        return self.release(s)

    def finish_fenced(self, s: State, intent: Intent) -> State:
        """``Settle.finish`` (the intent's row locked, so still pending): each member whose subtask is still submitted
        under its claim lands, the others are cancelled, except a landed one (``candidate_finish`` never writes over
        it)."""
        members = tuple(i for i in intent.cands if (sub := s.subs[s.cands[i].sub]).status == "submitted"
                        and sub.owner == s.cands[i].agent and sub.version == s.cands[i].version)
        s = replace(s, intents=tuple(x for x in s.intents if x != intent))
        for i in intent.cands:
            if i not in members and s.cands[i].status != "landed":
                s = self._cand(s, i, replace(s.cands[i], status="cut"))
        if not members:
            return s
        part = replace(intent, cands=members)
        return self.finish(replace(s, intents=(*s.intents, part)), part)

    def release(self, s: State) -> State:
        """Every blocked subtask whose dependencies all have a landed row becomes ready."""
        done = {s.cands[i].sub for i in s.landed}
        for d, _ in self.config.depends:
            if s.subs[d].status == "blocked" and all(on in done for dd, on in self.config.depends if dd == d):
                s = self._sub(s, d, replace(s.subs[d], status="ready"))
        return s

    def roll_back(self, s: State, intent: Intent) -> State:
        s = replace(s, intents=tuple(x for x in s.intents if x != intent))
        for i in intent.cands:
            c = s.cands[i]
            s = self._cand(s, i, replace(c, status="queued"))
            s = self._sub(s, c.sub, replace(s.subs[c.sub], landing=False))
        return s

    # -- small helpers -----------------------------------------------------------------------------------------------

    @staticmethod
    def _agent(s: State, a: int, g: Agent) -> State:
        return replace(s, agents=(*s.agents[:a], g, *s.agents[a + 1:]))

    @staticmethod
    def _sub(s: State, t: int, sub: Sub) -> State:
        return replace(s, subs=(*s.subs[:t], sub, *s.subs[t + 1:]))

    @staticmethod
    def _cand(s: State, i: int, c: Cand) -> State:
        return replace(s, cands=(*s.cands[:i], c, *s.cands[i + 1:]))

    def _seen(self, s: State) -> State:
        cands = tuple(replace(c, heard="seen") if c.status == "queued" and c.heard != "seen" else c for c in s.cands)
        return replace(s, cands=cands)

    def _drop(self, s: State, i: int, status: str) -> State:
        """Candidate ``i`` leaves the window (if it is in it) for ``status``: back to the queue, or cut for good."""
        window = tuple(sl for sl in s.window if sl.cand != i)
        c = s.cands[i]
        if c.status == "landed":  # another leader's landing took it: it stays landed (``candidate_finish``)
            return replace(s, window=window, base=s.base if window else ())
        s = replace(self._cand(s, i, replace(c, status=status)), window=window, base=s.base if window else ())
        return self._tell(s, i, keep=False) if status == "cut" else s

    def _clear_window(self, s: State) -> State:
        for sl in s.window:
            s = self._cand(s, sl.cand, replace(s.cands[sl.cand], status="queued"))
        return replace(s, window=(), base=())

    @staticmethod
    def _tell(s: State, i: int, *, keep: bool) -> State:
        """The agent, if it still believes in the claim, hears candidate ``i``'s verdict: keeps the claim (a
        rejection) or not. It waits on its newest push only (``mergebot wait`` is keyed on the commit)."""
        c = s.cands[i]
        g = s.agents[c.agent]
        if g.task == c.sub and g.version == c.version and newest(s, i):
            return Model._agent(s, c.agent, replace(g, waiting=False) if keep else Agent())
        return s
