"""The application under the other HTTP server: ``MERGEBOT_HTTP_SERVER=granian`` (mergebot/api/http.py).

The same application, lifespan and all, on granian's embedded server: the API answers, a real ``git push``
over smart HTTP lands, and SIGTERM stops it cleanly.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.bot import Fleet, commit, git

pytest.importorskip("granian")


@pytest.mark.bot_env(MERGEBOT_HTTP_SERVER="granian")
async def test_a_push_lands_under_granian_and_sigterm_stops_it(fleet: Fleet) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="under granian")
    claim, wt = fleet.start("ann")
    assert claim.subtask_id == sub.id
    sha = commit(wt, {"granian.txt": "served natively\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    deadline = time.monotonic() + 60
    while (await fleet.db.subtasks.get_subtask(sub.id)).status != "landed":
        assert time.monotonic() < deadline, fleet.bot.log.read_text()[-3000:]
        time.sleep(0.2)
    landed = await fleet.db.landing.landed(repo="demo", subtask_id=sub.id)
    assert [row.candidate_sha for row in landed] == [sha]
    me = fleet.client("ann").get("/api/v1/me")
    assert me["agent"]["name"] == "ann"
    served_by = httpx.get(f"{fleet.bot.url}/healthz").headers.get("server", "")
    assert "uvicorn" not in served_by  # uvicorn names itself in every answer
    assert "with granian" in fleet.bot.log.read_text()
    assert fleet.bot.proc is not None
    fleet.bot.proc.terminate()
    assert fleet.bot.wait_exit(30) == 0
