"""Signed landing statements, as the database keeps them (``attestations``): numbered per repository, written
with the landed rows (``mergebot.db.settle.Settle.finish``), and marked once copied to the repository's git notes."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from mergebot.db.base import Row, Sql


class AttestStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    async def facts(self, repo: str, candidate_ids: list[int], *, held: bool) -> tuple[dict[int, Row], int,
                                                                                  str | None]:
        """Each candidate's facts for its statements (``attest_facts``), the repository's next landing number, and
        (``held``) a digest of its held-out files: one read."""
        rows = await self.sql.all("attest_facts", repo=repo, ids=candidate_ids, held=held)
        first = rows[0] if rows else {}
        return {r["id"]: r for r in rows}, int(first.get("next_sequence") or 1), first.get("held_out_digest")

    async def unnoted(self, repo: str) -> list[Row]:
        return await self.sql.all("attest_unnoted", repo=repo)

    async def of_commits(self, repo: str, shas: list[str]) -> list[Row]:
        return await self.sql.all("attest_of_commits", repo=repo, shas=shas)

    async def noted(self, ids: list[int]) -> None:
        await self.sql.all("attest_noted", ids=ids)

    async def of_landed(self, landed_id: int, repo: str, sha: str) -> list[Row]:
        return await self.sql.all("attest_of_landed", landed_id=landed_id, repo=repo, sha=sha)

    async def landings(self, repo: str) -> list[Row]:
        return await self.sql.all("attest_landings", repo=repo)

    async def landing_envelopes(self, repo: str, shas: list[str]) -> dict[str, dict[str, Any]]:
        """Each commit's landing statement (the audit of main), from the landed rows' statements, else from an
        intent that kept one for a landing no landed row took."""
        found = {r["subject_sha"]: r["envelope"] for r in
                 await self.sql.all("attest_landing_envelopes", repo=repo, shas=shas)}
        missing = [s for s in shas if s not in found]
        if missing:
            found.update({r["subject_sha"]: r["envelope"] for r in
                          await self.sql.all("attest_intent_envelopes", repo=repo, shas=missing)})
        return found

    async def add(self, *, repo: str, landed_id: int | None, kind: str, subject_sha: str, sequence: int | None,
                  keyid: str, envelope: dict[str, Any]) -> None:
        """A statement made after its landing (a re-verification's)."""
        await self.sql.all("attest_insert", repo=repo, landed_id=landed_id, kind=kind, subject_sha=subject_sha,
                           sequence=sequence, keyid=keyid, envelope=Jsonb(envelope))

    async def add_reverify(self, *, repo: str, landed_id: int, subject_sha: str, keyid: str, job_id: int,
                           envelope: dict[str, Any]) -> bool:
        """A re-verification's statement, once per job: whether this call added it."""
        rows = await self.sql.all("attest_insert_reverify", repo=repo, landed_id=landed_id, subject_sha=subject_sha,
                                  keyid=keyid, job_id=job_id, envelope=Jsonb(envelope))
        return bool(rows)

    async def reverifies(self, landed_id: int, limit: int = 10) -> list[Row]:
        return await self.sql.all("attest_reverifies", landed_id=landed_id, limit=limit)
