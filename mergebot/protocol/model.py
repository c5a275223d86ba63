"""The landing protocol as a small explicit-state system (``docs/protocol.md`` tells it in prose).

A ``State`` is immutable (frozen dataclasses and tuples), so it hashes and compares; ``Model.steps`` lists every step
enabled in a state, each as ``(name, next state)``, the name a sentence a trace prints. Where the decision is
already pure code the step calls it, never a copy of it:

  * a push, and a candidate's fence before it joins the window or lands: the push rules' ``judge_ref``
    (``mergebot.landing.intake.checks``), on the ref ``subtask_ref`` names and the ``Owner`` row the database would
    give;
  * what the window does next: the planner's ``decide``, and how the fill forms batches: its ``batching``, ``joins``
    and ``closes`` (``mergebot.landing.window.planner``); the window's steps are ``mergebot.protocol.window``'s;
  * a failed candidate's verdict (a failed head, a left-out suspect, a stretch judged apart): the verdict policy's
    ``next_step`` (``mergebot.landing.judge.verdict``), with main's own run as the base;
  * the reconciler's choice for a pending intent: ``settle`` (``mergebot.landing.main.reconcile``).

Each step of ``Model`` is one method, so a planted bug (``mergebot.protocol.mutants``) is a subclass that replaces
one of them; the state it steps is ``mergebot.protocol.state``'s. A second replica appears only as a take-over
(``Config.takeovers``): the leader's lock goes mid-landing, the other leads and reconciles, and the old leader
carries its landing on as the real code would (``docs/protocol.md``, "Findings").
"""

from __future__ import annotations

from collections.abc import Iterator

from mergebot.landing.main.reconcile import settle
from mergebot.protocol.red import RedSteps
from mergebot.protocol.state import PENDING, Agent, Cand, History, Intent, State, Step, Sub, on_main, put


class Model(RedSteps):
    """The protocol's steps over ``State`` (the window's in ``WindowSteps``); ``mergebot.protocol.mutants`` replaces one
    step at a time."""

    # -- the start, and names ----------------------------------------------------------------------------------

    def initial(self) -> State:
        c = self.config
        blocked = {d for d, _ in c.depends}
        return State(subs=tuple(Sub("blocked" if i in blocked else "ready") for i in range(c.subtasks)),
                     agents=tuple(Agent() for _ in range(c.agents)))

    def compare(self, main: History, old: History) -> bool:
        """The compare of the compare-and-swap that moves main."""
        return main == old

    # -- the steps -------------------------------------------------------------------------------------------------

    def steps(self, s: State) -> Iterator[Step]:
        """Every step enabled in ``s``."""
        for name, nxt in self._all(s):
            yield name, put(nxt, reconciled=False) if nxt.reconciled and s.up else nxt

    def _all(self, s: State) -> Iterator[Step]:
        if not s.up:  # whatever else happens while the server is down happens as well just after its restart
            yield from self.restart(s)
            yield from self.old_leader(s)  # but a replica that lost its lock is another process: it goes on
            return
        for a in range(len(s.agents)):
            yield from self.agent_steps(s, a)
        for t in range(len(s.subs)):
            yield from self.expire(s, t)
            yield from self.cancel(s, t)
            yield from self.retry(s, t)
        yield from self.forge_push(s)
        if not (s.old and self.held(s, s.old[0])):  # the new leader's reconciler waits on the old one's intent
            yield from self.sweep(s)
            if s.red:  # planner rule 0: only a candidate judged alone on main lands (``red``)
                yield from self.alone(s)
            else:
                yield from self.fill(s)
                yield from self.run(s)
                yield from self.decide(s)
            yield from self.move_main(s)
            yield from self.finish_step(s)
        yield from self.post_land(s)
        yield from self.crash(s)
        yield from self.take_over(s)
        yield from self.old_leader(s)
        yield from self.lose_lock(s)

    # agents

    def agent_steps(self, s: State, a: int) -> Iterator[Step]:
        g, c = s.agents[a], self.config
        if g.silent:
            yield f"agent {a + 1} comes back", self._agent(s, a, put(g, silent=False))
            return
        if g.task >= 0 and not g.waiting:  # only a claim's lease hangs on its heartbeats
            yield f"agent {a + 1} goes silent", self._agent(s, a, put(g, silent=True))
        if g.task < 0:
            for t, sub in enumerate(s.subs):
                if sub.status == "ready" and sub.version < c.versions:
                    v = sub.version + 1
                    nxt = self._sub(s, t, put(sub, status="running", owner=a, version=v,
                                              tries=sub.tries + (c.attempts > 0)))
                    yield (f"agent {a + 1} claims subtask {t + 1} (claim version {v})",
                           self._agent(nxt, a, Agent(task=t, version=v)))
        elif s.pushes < c.pushes and (not g.waiting or s.repushes < c.repushes):  # waiting: a newer push replaces
            for good in (True, False):
                for risky in (False, True):
                    if (not good and s.bad >= c.bad) or (risky and s.risky >= c.risky):
                        continue
                    yield from self.push(s, a, good, risky)
                    if good and s.breaks < c.breaks:
                        yield from self.push(s, a, good, risky, breaks=True)

    def push(self, s: State, a: int, good: bool, risky: bool = False, breaks: bool = False) -> Iterator[Step]:
        """A push, judged by the push rules; a queued candidate's NOTIFY reaches the leader, or is lost. A ``risky``
        one carries a high failure estimate (its agent's record, its size), whether it fails or not; one that
        ``breaks`` passes its own check but breaks main's (``mergebot.protocol.red``)."""
        g = s.agents[a]
        kind = f"{'good' if good else 'bad'}{' risky' * risky}{' (main-breaking)' * breaks}"
        what = f"agent {a + 1} pushes {'again, ' * g.waiting}a {kind} change to subtask {g.task + 1} v{g.version}"
        s = put(s, pushes=s.pushes + 1, bad=s.bad + (not good), risky=s.risky + risky, repushes=s.repushes + g.waiting,
                breaks=s.breaks + breaks)
        code = self.fence(s, a, g.task, g.version)
        if code is not None:
            yield f"{what}: refused ({code}), it lets the subtask go", self._agent(s, a, Agent())
            return
        for heard in ("seen", "lost"):
            if heard == "lost" and s.lost >= self.config.lost:
                continue
            cand = Cand(g.task, g.version, a, good, heard=heard, risky=risky, breaks=breaks)
            cands = tuple(put(c, status="superseded") if c.sub == g.task and c.status == "queued" else c
                          for c in s.cands)  # ``candidates_supersede``: the older ones still queued
            nxt = put(s, cands=(*cands, cand), lost=s.lost + (heard == "lost"))
            nxt = self._sub(nxt, g.task, put(s.subs[g.task], status="submitted"))
            said = "its NOTIFY is lost" if heard == "lost" else "the leader hears its NOTIFY"
            yield (f"{what}: queued as candidate {len(s.cands) + 1}, {said}",
                   self._agent(nxt, a, put(g, waiting=True)))

    def expire(self, s: State, t: int) -> Iterator[Step]:
        """The recovery loop hands back a running subtask whose owner went silent, or never took it up (a reverted
        one sent back while its owner held another claim): its lease ran out."""
        sub, spent = s.subs[t], self.config.attempts
        g = s.agents[sub.owner] if sub.status == "running" else None
        if g is not None and (g.silent or (g.task, g.version) != (t, sub.version)):
            if spent and sub.tries >= spent:  # its attempts are spent: failed (the poison pill)
                yield (f"the lease of agent {sub.owner + 1} on subtask {t + 1} expires at its last attempt: the "
                       f"subtask fails", self._sub(s, t, put(sub, status="failed", owner=-1)))
                return
            yield (f"the lease of agent {sub.owner + 1} on subtask {t + 1} expires: the subtask is ready again",
                   self._sub(s, t, put(sub, status="ready", owner=-1)))

    def cancel(self, s: State, t: int) -> Iterator[Step]:
        """An operator cancels subtask ``t`` (``subtask_cancel``: any status but landed or cancelled, and never while
        a candidate of it is being landed, its intent written: ``SubtaskStore.cancel`` refuses that, ``being_landed``,
        so the refused cancel changes nothing): its owner is dropped, its claim version kept. Its agent learns it at
        its next push (refused: the push rules' ``not_running``); its candidates no longer hold their fence, so the
        intent is never written for one (``begin_landing`` fences them in the intent's transaction, the subtasks
        locked: the planner's ``valid``)."""
        sub = s.subs[t]
        if s.cancels < self.config.cancels and sub.status not in ("landed", "cancelled") and not self.landing(s, t):
            yield (f"an operator cancels subtask {t + 1} ({sub.status})",
                   put(self._sub(s, t, put(sub, status="cancelled", owner=-1)), cancels=s.cancels + 1))

    def landing(self, s: State, t: int) -> bool:
        """Whether a candidate of subtask ``t`` is being landed (``landing``: an intent names it), as the cancel's
        ``candidate_landing_of`` reads it: a cancel waits for its verdict."""
        return any(c.sub == t and c.reverts < 0 and c.status == "landing" for c in s.cands)

    def retry(self, s: State, t: int) -> Iterator[Step]:
        """An operator gives failed subtask ``t`` another round (``subtask_retry``): ready, or blocked while a
        dependency is not landed, its attempts 0 again; a no-op while a candidate of it is in flight (the API's
        ``in_flight``)."""
        sub = s.subs[t]
        if s.retries >= self.config.retries or sub.status != "failed" or any(
                c.sub == t and c.reverts < 0 and c.status in PENDING for c in s.cands):
            return
        waits = any(s.subs[on].status != "landed" for d, on in self.config.depends if d == t)
        status = "blocked" if waits else "ready"
        yield (f"an operator retries subtask {t + 1}: {status} again",
               put(self._sub(s, t, put(sub, status=status, tries=0)), retries=s.retries + 1))

    def forge_push(self, s: State) -> Iterator[Step]:
        if s.forged < self.config.forge:
            n = s.forged + 1
            yield f"someone pushes commit F{n} to the forge's main", put(s, main=(*s.main, (-n, 0)), forged=n)

    def sweep(self, s: State) -> Iterator[Step]:
        unheard = [i for i, c in enumerate(s.cands) if c.status == "queued" and c.heard != "seen"]
        if unheard:
            yield "the sweep finds the queue's unseen candidates", self._seen(s)

    def move_main(self, s: State) -> Iterator[Step]:
        if s.stage != "intent":
            return
        intent = s.intents[-1]
        if self.compare(s.main, intent.old):
            yield "main moves by compare-and-swap to the intent's commit", put(
                s, main=intent.new, stage="moved", unproven=s.unproven or not intent.proven)
        else:
            nxt = self.roll_back(s, intent)
            yield "main moved under the landing: the compare-and-swap fails and the intent is rolled back", \
                self._clear_window(put(nxt, stage=""))

    def finish_step(self, s: State) -> Iterator[Step]:
        if s.stage == "moved":
            intent = s.intents[-1]
            nxt = self.judge_suspects(put(self.finish(s, intent), stage=""), intent.cands)
            verdicts = {True: "rejected on its failed run", False: "back in the queue"}
            judged = "".join(f"; suspect {sp.cand + 1} is {verdicts[nxt.cands[sp.cand].status == 'rejected']}"
                             for sp in s.suspects if sp not in nxt.suspects)
            judged += "".join(f"; subtask {t + 1} goes back to agent {sub.owner + 1} at claim version {sub.version}"
                              for t, sub in enumerate(nxt.subs)
                              if (s.subs[t].status, sub.status) == ("landed", "running"))
            judged += "".join(f"; candidate {i + 1}'s subtask was cancelled: refused, main keeps its commit"
                              for i in intent.cands if nxt.cands[i].status == "cut")
            yield f"the landed rows are written, dependents released, the intent finished{judged}", nxt

    def take_over(self, s: State) -> Iterator[Step]:
        """The leader's lock goes (its session died) while its landing is in flight; the other replica takes the
        lock and, as a new leadership does, reconciles before its queue moves. The old one does not know yet: it
        checks its leadership between passes, not inside a landing."""
        if s.stage and not s.old and s.takeovers < self.config.takeovers:
            old = put(s, old=(s.intents[-1],), old_stage=s.stage, stage="", takeovers=s.takeovers + 1)
            nxt = self.reconcile_intents(self._clear_window(old))
            yield "the leader loses its lock mid-landing; the other replica leads and reconciles", self._seen(nxt)

    def lose_lock(self, s: State) -> Iterator[Step]:
        """The leader's lock goes between passes, no landing in flight (``Config.lockouts``): the other replica takes
        it and, as a new leadership does, reconciles before its queue moves (``Queue._reconcile``: the candidates the
        old leader was verifying go back to the queue, ``candidates_requeue_stuck``, and it reads the whole queue).
        The old leader notices at its next pass (``Leadership.lead``: its lock's connection is gone) and stops, its
        window and suspects dropped (``Speculator.drop``), so nothing of its memory acts again."""
        if s.lockouts < self.config.lockouts and not s.stage and not s.old:
            nxt = self.reconcile_intents(self._clear_window(put(s, lockouts=s.lockouts + 1)))
            yield ("the leader's lock goes between passes; the other replica leads and reconciles, the old one "
                   "stops at its next pass", self._seen(nxt))

    def old_leader(self, s: State) -> Iterator[Step]:
        """The replica that lost its lock finishes the landing it had begun, as the real code would: it locks its
        intent's row first (``LandingStore.settling``) and stops if the new leader settled it."""
        if not s.old:
            return
        intent = s.old[0]
        done = put(s, old=(), old_stage="")
        if s.old_stage == "intent" and self.settled(s, intent):
            yield "the old leader finds its intent settled by the new leader: it stops", done
        elif s.old_stage == "intent":
            if self.compare(s.main, intent.old):
                yield "the old leader's compare-and-swap moves main to its intent's commit", put(
                    s, main=intent.new, old_stage="moved", unproven=s.unproven or not intent.proven)
            else:
                yield "the old leader's compare-and-swap fails: it rolls its intent back", self.roll_back(done, intent)
        else:
            yield "the old leader writes its landed rows", self.finish_fenced(done, intent)

    def crash(self, s: State) -> Iterator[Step]:
        if s.crashes < self.config.crashes:
            yield "the server crashes", put(s, up=False, window=(), base=(), suspects=(), stage="",
                                                crashes=s.crashes + 1)

    def restart(self, s: State) -> Iterator[Step]:
        if any(self.held(s, intent) for intent in s.intents):
            return  # the reconciler waits on the row the old leader holds locked: it runs once that is written
        nxt = self.reconcile_intents(s)
        for i, c in enumerate(nxt.cands):
            if c.status == "window":  # caught mid-verification: back to the queue
                nxt = self._cand(nxt, i, put(c, status="queued"))
        yield "the server restarts; the reconciler runs", put(self._seen(nxt), up=True, reconciled=True)

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
        """One transaction: the landed rows, the subtasks landed (a revert's culprit sent back instead), their
        dependents released, the intent closed; the newest landing's post-land check is due. A member whose subtask
        was cancelled under the landing is refused (``subtask_land``'s fence): its candidate is cancelled and the
        others land; with none left the intent is abandoned (``Settle.abandon``), main keeping its commit."""
        refused = tuple(i for i in intent.cands if s.cands[i].reverts < 0
                        and s.subs[s.cands[i].sub].status == "cancelled")
        if refused:
            s = put(s, intents=tuple(x for x in s.intents if x != intent))
            for i in refused:
                c = s.cands[i]
                s = self._sub(self._cand(s, i, put(c, status="cut")), c.sub, put(s.subs[c.sub], landing=False))
                s = self._tell(s, i, keep=False)
            rest = tuple(i for i in intent.cands if i not in refused)
            if not rest:
                return s
            intent = put(intent, cands=rest)
            s = put(s, intents=(*s.intents, intent))
        s = put(s, landed=(*s.landed, *intent.cands), intents=tuple(x for x in s.intents if x != intent),
                crossed=s.crossed or self.crosses(s, intent.cands),
                unheld=s.unheld or any(s.cands[i].reverts < 0 and self.waits_on_revert(s, s.cands[i].sub)
                                       for i in intent.cands))
        for i in intent.cands:
            c = s.cands[i]
            s = self._cand(s, i, put(c, status="landed", told="landed"))
            if c.reverts >= 0:
                s = self.send_back(s, i)
                continue
            s = self._sub(s, c.sub, put(s.subs[c.sub], status="landed", owner=-1, landing=False))
            s = self._tell(s, i, keep=False)
        if self.postland:
            s = put(s, check=len(s.landed))
        return self.release(s)

    def finish_fenced(self, s: State, intent: Intent) -> State:
        """``Settle.finish`` (the intent's row locked, so still pending): each member whose subtask is still submitted
        under its claim lands, the others are cancelled, except a landed one (``candidate_finish`` never writes over
        it)."""
        members = tuple(i for i in intent.cands if (sub := s.subs[s.cands[i].sub]).status == "submitted"
                        and sub.owner == s.cands[i].agent and sub.version == s.cands[i].version)
        s = put(s, intents=tuple(x for x in s.intents if x != intent))
        for i in intent.cands:
            if i not in members and s.cands[i].status != "landed":
                s = self._cand(s, i, put(s.cands[i], status="cut"))
        if not members:
            return s
        part = put(intent, cands=members)
        return self.finish(put(s, intents=(*s.intents, part)), part)

    def release(self, s: State) -> State:
        """Every blocked subtask whose dependencies all have a landed row becomes ready."""
        done = {s.cands[i].sub for i in s.landed}
        for d, _ in self.config.depends:
            if s.subs[d].status == "blocked" and all(on in done for dd, on in self.config.depends if dd == d):
                s = self._sub(s, d, put(s.subs[d], status="ready"))
        return s

    def roll_back(self, s: State, intent: Intent) -> State:
        s = put(s, intents=tuple(x for x in s.intents if x != intent))
        for i in intent.cands:
            c = s.cands[i]
            s = self._cand(s, i, put(c, status="queued"))
            if c.reverts < 0:
                s = self._sub(s, c.sub, put(s.subs[c.sub], landing=False))
        return s

    def _seen(self, s: State) -> State:
        cands = tuple(put(c, heard="seen") if c.status == "queued" and c.heard != "seen" else c for c in s.cands)
        return put(s, cands=cands)
