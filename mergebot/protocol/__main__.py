"""``python -m mergebot.protocol [--long | --batched | --superseding | --red | --operators] [--mutant NAME]
[--takeovers N] [--lockouts N]``:
check the landing protocol's model and print the number of states, the time and the result (a counterexample's trace
when a property fails). Exit status 1 when a property fails (for a mutant: when the checker misses it).

``python -m mergebot.protocol --trace``: hold the events of the run in the settings' database (``MERGEBOT_DATABASE_URL``
or the data directory's embedded one) to the model (``mergebot.protocol.trace``); exit status 1 at the first event
it does not allow, named."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace

from mergebot.db.database import open_database
from mergebot.protocol.check import check
from mergebot.protocol.model import Model
from mergebot.protocol.mutants import BOUNDS, MUTANTS
from mergebot.protocol.replay import replay
from mergebot.protocol.state import BATCHED, DEFAULT, LONG, OPERATORS, RED, SUPERSEDING
from mergebot.protocol.trace import Verdict
from mergebot.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mergebot.protocol", description=__doc__)
    parser.add_argument("--long", action="store_true", help="the larger bound (as MERGEBOT_LONG_DRILLS)")
    parser.add_argument("--batched", action="store_true", help="batches of two with estimates (leave-outs)")
    parser.add_argument("--superseding", action="store_true", help="an agent may push again while one is pending")
    parser.add_argument("--red", action="store_true", help="a landed change breaks main: post-land checks, the mend")
    parser.add_argument("--operators", action="store_true",
                        help="an operator cancels and retries, a subtask fails at its last attempt (Findings: a cancel "
                             "under a landing)")
    parser.add_argument("--mutant", choices=sorted(MUTANTS),
                        help="check a planted bug instead, on its own bound unless --long: it must fail")
    parser.add_argument("--takeovers", type=int, default=None,
                        help="allow this many take-overs of the lead mid-landing (docs/protocol.md, Findings)")
    parser.add_argument("--lockouts", type=int, default=None,
                        help="allow this many losses of the leader's lock between passes (docs/protocol.md, the model)")
    parser.add_argument("--max-states", type=int, default=None)
    parser.add_argument("--trace", action="store_true", help="hold a finished run's events to the model instead")
    args = parser.parse_args(argv)
    if args.trace:
        verdict = asyncio.run(trace_settings_database())
        print(verdict)
        return int(not verdict.accepted)
    config = LONG if args.long else BATCHED if args.batched else SUPERSEDING if args.superseding else \
        RED if args.red else OPERATORS if args.operators else DEFAULT
    if args.mutant and not args.long:
        config = BOUNDS.get(args.mutant, config)
    if args.takeovers is not None:
        config = replace(config, takeovers=args.takeovers)
    if args.lockouts is not None:
        config = replace(config, lockouts=args.lockouts)
    model = MUTANTS[args.mutant](config) if args.mutant else Model(config)
    report = check(model, max_states=args.max_states)
    print(f"{type(model).__name__} on {config}")
    print(report)
    caught = report.violation is not None
    return int(caught) if not args.mutant else int(not caught)


async def trace_settings_database() -> Verdict:
    async with open_database(Settings()) as db:
        return await replay(db)


if __name__ == "__main__":
    sys.exit(main())
