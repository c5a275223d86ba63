"""Hostile input, generated, for the JSON API: schemathesis against ``/openapi.json`` of a real ``mergebot serve``
on a real PostgreSQL, as an admin, an agent, a reviewer and nobody: no 5xx, every status and body as documented,
and every secured operation answers 401 without a token (example counts are small and fixed, with no shrinking
past a first failure). Two findings of that run are kept as plain tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from mergebot.auth import Role
from mergebot.db.database import Database
from tests.support.bot import BotProcess


@pytest.fixture
async def api_server(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> Any:
    tokens: dict[str | None, str] = {}
    for name, role in (("fuzz-admin-7f3e", Role.ADMIN), ("ann", Role.AGENT), ("rita", Role.REVIEWER)):
        _, tokens[name] = await e2e_db.agents.add_agent(name=name, role=role)
    agent = await e2e_db.agents.agent_by_name("ann")
    for title in ("one", "two", "three"):
        await e2e_db.subtasks.create_subtask(actor_id=None, title=title)
    await e2e_db.subtasks.claim(agent_id=agent.id)
    bot = BotProcess(e2e_db_url, tmp_path / "data", MERGEBOT_VERIFIER_WORKERS="0").start()
    try:
        yield bot, tokens
    finally:
        bot.stop()


async def test_values_postgres_cannot_store_are_422_not_500(db: Database, app_client: TestClient) -> None:
    """Found by the API run below: a NUL in any text, or an integer past bigint, used to be a 500."""
    _, token = await db.agents.add_agent(name="rita", role=Role.REVIEWER)
    _, lead = await db.agents.add_agent(name="lead", role=Role.LEAD)
    auth = {"Authorization": f"Bearer {token}"}
    for path in ("/api/v1/subtasks?group=a%00b", "/api/v1/subtasks/99999999999999999999/events",
                 "/api/v1/landed?before=-99999999999999999999", "/api/v1/candidates?repo=%00"):
        r = app_client.get(path, headers=auth)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid", (path, r.text)
    r = app_client.post("/api/v1/notes", json={"body": "a\u0000b"}, headers={"Authorization": f"Bearer {lead}"})
    assert r.status_code == 422, r.text


def test_openapi_documents_the_error_shape_not_fastapis(app_client: TestClient) -> None:
    spec = app_client.get("/openapi.json").json()
    claim = spec["paths"]["/api/v1/subtasks/claim"]["post"]["responses"]
    for status in ("401", "403", "409", "422"):
        ref = claim[status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorOut")
    assert "HTTPValidationError" not in json.dumps(spec)


async def test_schemathesis_api_no_5xx_and_responses_as_documented(api_server: Any) -> None:
    import schemathesis
    from schemathesis import checks as st_checks
    from schemathesis.generation.modes import GenerationMode
    from schemathesis.specs.openapi import checks as oa_checks

    bot, tokens = api_server
    callers: list[str | None] = [None, *tokens]
    schema = schemathesis.openapi.from_url(f"{bot.url}/openapi.json")
    checks = [st_checks.not_a_server_error, oa_checks.status_code_conformance, oa_checks.content_type_conformance,
              oa_checks.response_schema_conformance, oa_checks.response_headers_conformance]
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]  # Err raises
    assert len(operations) >= 40
    tried: dict[str, set[str | None]] = {}

    def run(op: Any) -> None:
        raw = op.definition.raw
        strategy = op.as_strategy(GenerationMode.POSITIVE)
        if raw.get("parameters") or raw.get("requestBody"):
            strategy = strategy | op.as_strategy(GenerationMode.NEGATIVE)
        secured = bool(raw.get("security"))

        @settings(max_examples=6, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy, who=st.sampled_from(callers))
        def one(case: Any, who: str | None) -> None:
            # long polls are cut short: a wait of up to 60 s per example would be the whole budget
            if isinstance(case.body, dict) and op.path.endswith("/wait"):
                t = case.body.get("timeout", 30)
                if isinstance(t, int | float) and not isinstance(t, bool) and 0 <= t <= 60:
                    case.body["timeout"] = 0
            if isinstance(case.query, dict) and isinstance(case.query.get("wait"), int | float):
                case.query["wait"] = 0 if 0 <= case.query["wait"] <= 60 else case.query["wait"]
            headers = {"Authorization": f"Bearer {tokens[who]}"} if who else {}
            response = case.call_and_validate(base_url=bot.url, headers=headers, checks=checks, timeout=15)
            tried.setdefault(op.label, set()).add(who)
            if secured and who is None:
                assert response.status_code in (400, 401, 413), (op.label, response.status_code)

        one()

    for op in operations:
        run(op)
    assert len(tried) == len(operations)
    log = bot.log.read_text()
    assert "Traceback" not in log and '"level": "error"' not in log
