"""The signing key is never in a check's view (issue 44): a real push whose tests go looking for it, run by the real
verifier under bubblewrap, lands with a statement that still verifies, and no byte of the key reaches anything the
agent's token can read (API, MCP, pages)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mergebot.attest import chain, keys
from mergebot.git import notes
from tests.support.bot import Fleet, check_command, until
from tests.test_hostile import readable_by_an_agent
from tests.test_judged import push
from verifier import sandbox as sb

pytestmark = pytest.mark.skipif(not sb.bwrap_usable(), reason="the verifier's sandbox needs a usable bubblewrap")

# Every way the test tries: the key's own path, the data directory's files, a walk of the whole view for *.pem, the
# server's working directory and environment through /proc (its own PID namespace: none), and the same from the
# module's import (not only from a test function).
HUNT = '''import os, pathlib

KEY = {key!r}
FOUND = []


def hunt():
    for path in (KEY, os.path.join(os.path.dirname(KEY), "trust.json"), os.path.dirname(os.path.dirname(KEY))):
        try:
            FOUND.append(pathlib.Path(path).read_text()[:4000])
        except OSError as e:
            FOUND.append(f"{{path}}: {{type(e).__name__}}")
    seen = 0
    for root, dirs, files in os.walk("/"):
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
        for name in files:
            seen += 1
            if name.endswith(".pem") and "attest" in root:
                FOUND.append(pathlib.Path(root, name).read_text()[:4000])
        if seen > 200000:
            break
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                FOUND.append(open(f"/proc/{{pid}}/environ", "rb").read().decode("latin-1")[:4000])
            except OSError:
                pass
    print("HUNT:", FOUND)


hunt()


def test_hunt():
    FOUND.clear()
    hunt()
    # for this test's sake only (an attacker would pass either way and leak the key in its output): it lands only if
    # the key's path was tried and is not there, and nothing found holds a private key
    assert FOUND[0].endswith("FileNotFoundError"), FOUND[:1]
    assert not [f for f in FOUND if "PRIVATE KEY" in f]
'''


async def test_a_check_never_sees_the_signing_key(make_fleet: Callable[..., Any]) -> None:
    fleet: Fleet = await make_fleet(check_command())
    data = fleet.bot.data_dir
    key = keys.key_path(data)
    private = key.read_text()
    body = "".join(private.splitlines()[1:-1])  # the key's base64, without the PEM's armour lines
    out = await push(fleet, "mallory", "hunt the key", {"tests/test_hunt.py": HUNT.format(key=str(key))})
    assert out["status"] == "landed", out  # its test proves the key's path was tried and found empty
    cand, sub = out["id"], out["verdict"]["subtask_id"]
    seen = await readable_by_an_agent(fleet, "mallory", [cand], [sub])
    leaked = [where for where, text in seen.items() if body in text or body[:24] in text]
    assert not leaked, leaked
    assert key.read_text() == private  # nor was it changed
    # and the landing it made is proven by that same key
    head = fleet.main()
    await until(lambda: notes.read(fleet.bare().path, head) is not None, timeout=30)  # the note follows the landing
    trust = keys.read_trust(keys.trust_path(data).read_text())
    statement, keyid = chain.landing_of(head, notes.read(fleet.bare().path, head) or "", trust, "demo")
    assert keyid == keys.signer(data).public_key.keyid and statement["predicate"]["sandbox"]["kind"] == "bwrap"
