"""A webhook redelivery storm: the same signed push delivery many times at once.

A forge redelivers with the same delivery id; a replay comes with a fresh one. Either way the bot must queue the
push once and answer every other copy without queueing it again. ``github_push_body`` and ``signed_headers`` build
the delivery as GitHub, Gitea or Forgejo would send it (HMAC-SHA256 of the raw body with the webhook secret).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx


def github_push_body(repo_full_name: str, ref: str, before: str, after: str, sender: str) -> bytes:
    return json.dumps({"ref": ref, "before": before, "after": after, "created": set(before) == {"0"},
                       "deleted": False, "forced": False, "repository": {"full_name": repo_full_name},
                       "sender": {"login": sender}, "pusher": {"name": sender}}).encode()


def signed_headers(forge: str, secret: str, body: bytes, delivery: str, event: str = "push") -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if forge == "github":
        return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": f"sha256={digest}",
                "Content-Type": "application/json"}
    prefix = "X-Forgejo" if forge == "forgejo" else "X-Gitea"
    return {f"{prefix}-Event": event, f"{prefix}-Delivery": delivery, f"{prefix}-Signature": digest,
            "X-Gitea-Signature": digest, "Content-Type": "application/json"}


def redelivery_storm(server: str, forge: str, secret: str, body: bytes, *, copies: int = 50,
                     same_id: bool = True, workers: int = 50) -> list[tuple[int, dict[str, Any]]]:
    """The same delivery ``copies`` times at once (same id, as a forge's redelivery; or a fresh id each time, as
    a replay). Returns every (status, body) answer."""
    endpoint = "github" if forge == "github" else "gitea"
    first = str(uuid.uuid4())

    def one(i: int) -> tuple[int, dict[str, Any]]:
        delivery = first if same_id else f"{first}-{i}"
        r = httpx.post(f"{server.rstrip('/')}/webhooks/{endpoint}", content=body,
                       headers=signed_headers(forge, secret, body, delivery), timeout=60)
        try:
            data = r.json()
        except ValueError:
            data = {"text": r.text[:500]}
        return r.status_code, data

    with ThreadPoolExecutor(min(workers, copies)) as pool:
        return list(pool.map(one, range(copies)))
