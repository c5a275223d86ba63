"""A new user's first hour, run for real and written down: ``python docs/first-hour.py > docs/first-hour.md``.

It clones this checkout into a temporary directory, installs it as the README says, runs the demo, then follows
"Running it" by hand (init, agents, serve, a repository, a task tree, start/submit) with the careless input of
issue 43's friction list on the way. Every command is run, and its output and exit code are printed as they came;
nothing is edited afterwards. ``--venv PATH`` reuses an installed environment instead of installing (quicker, for
trying the script); the transcript in docs/ is made without it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Transcript:
    def __init__(self, home: Path, clone: Path) -> None:
        self.clone = clone
        self.env = {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "NO_COLOR": "1",
                    "PATH": f"{clone / '.venv' / 'bin'}:{os.environ['PATH']}"}
        for k in [k for k in self.env if k.startswith("MERGEBOT_")]:
            del self.env[k]

    def say(self, text: str) -> None:
        print(text)
        sys.stdout.flush()

    def section(self, title: str, words: str = "") -> None:
        self.say(f"\n## {title}\n")
        if words:
            self.say(words + "\n")

    def run(self, cmd: str, *, cwd: Path | None = None, env: dict[str, str] | None = None,
            shown: str | None = None, timeout: float = 300, interrupt_after: float | None = None,
            keep: int = 60) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` in bash and print it with its output (the last ``keep`` lines) and exit code."""
        where = cwd or self.clone
        full = {**self.env, **(env or {})}
        start = time.monotonic()
        proc = subprocess.Popen(["bash", "-c", cmd], cwd=where, env=full, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=interrupt_after is not None)
        if interrupt_after is not None:
            time.sleep(interrupt_after)
            os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=timeout)
        took = time.monotonic() - start
        lines = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", out).rstrip("\n").splitlines()
        if len(lines) > keep:
            lines = [f"... ({len(lines) - keep} lines above left out)", *lines[-keep:]]
        self.say("```console")
        prefix = "" if where == self.clone else f"({where.name}) "
        self.say(f"{prefix}$ {shown or cmd}")
        for line in lines:
            self.say(line)
        self.say(f"[exit {proc.returncode}{', Ctrl-C sent' if interrupt_after is not None else ''}"
                 f"{f', {took:.0f} s' if took >= 5 else ''}]")
        self.say("```")
        return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, help="an installed environment to use instead of installing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="first-hour-") as tmp:
        base = Path(tmp)
        home = base / "home"
        home.mkdir()
        clone = base / "mergebot"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        t = Transcript(home, clone)
        t.say("# A first hour with Mergebot, as a new user runs it\n")
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        t.say(f"Made by `python docs/first-hour.py` on {time.strftime('%Y-%m-%d')} from commit "
              f"`{head.stdout.strip()}`"
              " on a fresh clone: every command below was run as shown and its output is as it came (long outputs "
              "keep their last lines). The numbers in brackets are issue 43's friction list.")
        t.run("git config --global user.name 'Ann Example' && git config --global user.email ann@example.com",
              cwd=home)
        t.section("Quick start", "The README's first command: install, then the demo.")
        if args.venv:
            os.symlink(args.venv.resolve(), clone / ".venv")
            t.say("_(this run reused an installed environment: `--venv`)_")
            t.run(".venv/bin/mergebot demo", keep=40)
        else:
            t.run("python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/mergebot demo",
                  timeout=900, keep=40)
        t.run("mergebot --help | head -20")
        first_hour(t, base)


def first_hour(t: Transcript, base: Path) -> None:
    c = t.clone
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    t.section("Running it", "`init`, two agents, and the server (on another port than the default, as the README "
              "says how).")
    init = t.run("mergebot init")
    admin = next(w for w in init.stdout.split() if w.startswith("mb_"))
    t.env["MERGEBOT_TOKEN"] = admin
    lead = t.run("mergebot agent add lead --role lead")
    lead_token = next(w for w in lead.stdout.split() if w.startswith("mb_"))
    ann = t.run("mergebot agent add ann")
    ann_token = next(w for w in ann.stdout.split() if w.startswith("mb_"))
    t.run("mergebot agent add 'bad name!'", shown="mergebot agent add 'bad name!'    # [5]")
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", free_port()))
    blocker.listen()
    t.run(f"mergebot serve --port {blocker.getsockname()[1]}", shown=f"mergebot serve --port "
          f"{blocker.getsockname()[1]}    # [2] a port in use", timeout=60)
    blocker.close()
    t.run(f"mergebot serve --data-dir {base}/mistyped --port {free_port()}", interrupt_after=6, timeout=60,
          shown="mergebot serve --data-dir ../mistyped    # [3] a new directory, then Ctrl-C")
    log = open(base / "serve.log", "w")  # noqa: SIM115 - the server outlives this block
    server = subprocess.Popen(["mergebot", "serve", "--port", str(port)], cwd=c, env=t.env, stdout=log,
                              stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(300):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        t.say(f"```console\n$ mergebot serve --port {port} &\n```")
        with_server(t, base, url, admin, lead_token, ann_token)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)
        log.close()
    t.section("The server's log", "What `serve` printed through the whole session (first lines).")
    t.say("```console")
    for line in (base / "serve.log").read_text().splitlines()[:12]:
        t.say(line)
    t.say("```")


def with_server(t: Transcript, base: Path, url: str, admin: str, lead: str, ann: str) -> None:
    t.env["MERGEBOT_URL"] = url
    t.section("Tokens and addresses [4]")
    t.run("MERGEBOT_TOKEN= mergebot list")
    t.run("MERGEBOT_TOKEN=mb_wrong mergebot list")
    t.run("MERGEBOT_URL= mergebot verify HEAD --repo nope", env={"MERGEBOT_URL": ""},
          shown="unset MERGEBOT_URL; mergebot verify HEAD --repo nope")
    t.section("A repository", "The README's first try: a repository with a test, added with its check.")
    app = base / "app"
    t.run("mkdir app && (cd app && git init -q -b main && printf 'def add(a, b):\\n    return a + b\\n' > calc.py && "
          "printf 'from calc import add\\n\\ndef test_add():\\n    assert add(2, 2) == 4\\n' > test_calc.py && "
          "git add -A && git commit -qm initial)", cwd=base)
    t.run(f"mergebot repo add app --from {app} --verifier 'python -m pytest -q' --protect ci/ "
          "--protect pyproject.toml", shown="mergebot repo add app --from ../app --verifier 'python -m pytest -q' "
          "--protect ci/ --protect pyproject.toml")
    t.section("Task trees [12]", "A tree file with mistakes first, then the example.")
    (base / "bad.yaml").write_text("tasks:\n  - title: one\n")
    (base / "broken.yaml").write_text("subtasks:\n  - title: [one\n")
    t.env["MERGEBOT_TOKEN"] = lead
    t.run(f"mergebot create --file {base}/bad.yaml", shown="mergebot create --file bad.yaml")
    t.run(f"mergebot create --file {base}/broken.yaml", shown="mergebot create --file broken.yaml")
    t.run("mergebot create --file no-such.yaml")
    t.run("mergebot create --file examples/tree.yaml")
    t.run("mergebot list --status ready")
    t.section("An agent's first subtask", "ann starts work in a worktree, changes the code and submits.")
    t.env["MERGEBOT_TOKEN"] = ann
    wt = base / "wt"
    t.run(f"mergebot start --repo app --dir {wt}", shown="mergebot start --repo app --dir ../wt")
    t.run(f"mergebot status --dir {wt}", shown="mergebot status --dir ../wt")
    t.run("printf 'def add(a, b):\\n    return a + b\\n\\n\\ndef mul(a, b):\\n    return a * b\\n' > calc.py && "
          "git commit -qam 'Add mul' && mergebot submit", cwd=wt)
    t.section("A failing test [10]", "The next subtask breaks `add`; the verdict names the test.")
    t.run(f"mergebot start --repo app --dir {wt}", shown="mergebot start --repo app --dir ../wt")
    t.run("sed -i 's/return a + b/return a - b/' calc.py && git commit -qam 'Break add' && mergebot submit",
          cwd=wt)
    t.run("mergebot wait --timeout 1 3", cwd=wt, shown="mergebot wait --timeout 1 3    # [6] still running")
    t.run("mergebot show 3 | head -12", shown="mergebot show 3 | head -12    # [6]")
    t.section("A push to a subtask nobody claimed [7]", "Subtask 5 is blocked and was never claimed.")
    t.run("git push -q origin HEAD:refs/heads/subtasks/5/v1", cwd=wt)
    t.section("A conflict, and a rebase [8] [9]", "bob changes the same line as ann; bob lands first.")
    t.env["MERGEBOT_TOKEN"] = admin
    bob = t.run("mergebot agent add bob")
    bob_token = next(w for w in bob.stdout.split() if w.startswith("mb_"))
    t.env["MERGEBOT_TOKEN"] = bob_token
    wb = base / "wt-bob"
    t.run(f"mergebot start --repo app --dir {wb}", shown="mergebot start --repo app --dir ../wt-bob")
    t.run("sed -i 's/return a + b/return b + a/' calc.py && git commit -qam 'Commute add' && mergebot submit",
          cwd=wb)
    t.env["MERGEBOT_TOKEN"] = ann
    t.run("git revert -n HEAD && sed -i 's/return a + b/return (a + b)/' calc.py && git commit -qam 'Fix add' "
          "&& mergebot submit", cwd=wt)
    t.run("git fetch -q origin main && git rebase origin/main", cwd=wt)
    t.run("mergebot submit", cwd=wt, shown="mergebot submit    # in the middle of the rebase")
    t.run("git checkout --theirs calc.py && git add calc.py && GIT_EDITOR=true git rebase --continue && "
          "mergebot submit", cwd=wt)
    t.section("Starting again in the same worktree [11]")
    t.run(f"mergebot start --repo app --dir {wt}", shown="mergebot start --repo app --dir ../wt")
    t.run("git checkout -q -b experiment && mergebot status --dir . | head -4", cwd=wt)
    t.section("Careless input [12] [13] [6]")
    t.run("mergebot submit --dir /no/such/dir")
    t.run("mergebot landed --repo nope")
    t.run("mergebot landed --repo app")
    t.section("Interrupted [1]", "Ctrl-C while `wait` waits.")
    t.run("mergebot wait 1 --timeout 60", interrupt_after=1.5)
    t.section("Pages [14]", f"The pages are at {url}/ (see docs/screenshots/).")
    t.run(f"curl -s -o /dev/null -w '%{{http_code}} -> %{{redirect_url}}\\n' {url}/ui/queue",
          shown="curl -s -o /dev/null -w '%{http_code} -> %{redirect_url}' $MERGEBOT_URL/ui/queue    # sign in first")


if __name__ == "__main__":
    main()
