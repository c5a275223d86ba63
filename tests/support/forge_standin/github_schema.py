"""GitHub's REST API as its published OpenAPI description has it: the subset mergebot calls, loaded once.

The subset (``tests/forge_openapi/github_subset.json``, extracted from GitHub's published OpenAPI description by
``tests/forge_openapi/extract.py``) gives the stand-in its example responses (:func:`github_example`) and the
tests their schemas: :func:`validate_github_response` checks a body against the published response schema,
:func:`github_request_problem` a request body against the published request schema. OpenAPI 3.0's
``nullable`` is turned into JSON Schema's ``null`` alternative on the way.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.protocols import Validator

SUBSET_PATH = Path(__file__).parents[2] / "forge_openapi" / "github_subset.json"
GITHUB_STATES = ("error", "failure", "pending", "success")
GITHUB_DESCRIPTION_LIMIT = 140
GITHUB_DOCS = "https://docs.github.com/rest"
STATUS_DOCS = "https://docs.github.com/rest/commits/statuses#create-a-commit-status"

# Paths of the GitHub operations served, as written in the OpenAPI description.
REPO = "/repos/{owner}/{repo}"
CREATE_STATUS = "/repos/{owner}/{repo}/statuses/{sha}"
LIST_STATUSES = "/repos/{owner}/{repo}/commits/{ref}/statuses"
COMBINED_STATUS = "/repos/{owner}/{repo}/commits/{ref}/status"
PULL = "/repos/{owner}/{repo}/pulls/{pull_number}"
INSTALLATION = "/repos/{owner}/{repo}/installation"
ACCESS_TOKENS = "/app/installations/{installation_id}/access_tokens"
CHECK_RUNS = "/repos/{owner}/{repo}/check-runs"
CHECK_RUN = "/repos/{owner}/{repo}/check-runs/{check_run_id}"
ISSUE_COMMENTS = "/repos/{owner}/{repo}/issues/{issue_number}/comments"
ISSUE_COMMENT = "/repos/{owner}/{repo}/issues/comments/{comment_id}"

Json = Any


@functools.cache
def github_subset() -> dict[str, Any]:
    """The extracted subset of GitHub's OpenAPI description (parsed once)."""
    data: dict[str, Any] = json.loads(SUBSET_PATH.read_text())
    return data


def _deref(node: Json) -> Json:
    """Follow a top-level ``#/components/...`` reference of the subset (responses, examples)."""
    while isinstance(node, dict) and "$ref" in node:
        _, kind, name = node["$ref"].removeprefix("#/").split("/")
        node = github_subset()["components"][kind][name]
    return node


def _response_content(path: str, method: str, status: int) -> dict[str, Any]:
    response = _deref(github_subset()["paths"][path][method]["responses"][str(status)])
    content: dict[str, Any] = response["content"]["application/json"]
    return content


def github_example(path: str, method: str, status: int) -> Json:
    """A deep copy of the first documented example response of an operation."""
    examples = _response_content(path, method, status)["examples"]
    return copy.deepcopy(_deref(next(iter(examples.values())))["value"])


def openapi_to_json_schema(node: Json) -> Json:
    """Turn an OpenAPI 3.0 schema into JSON Schema: ``nullable: true`` becomes a ``null`` alternative."""
    if isinstance(node, list):
        return [openapi_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: v if k in ("example", "examples") else openapi_to_json_schema(v) for k, v in node.items()}
    if out.pop("nullable", False):
        if "type" in out:
            out["type"] = [out["type"], "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


@functools.cache
def _converted_components() -> dict[str, Any]:
    components: dict[str, Any] = openapi_to_json_schema(github_subset()["components"])
    return components


def github_validator(schema: Json) -> Validator:
    """A validator for an OpenAPI schema of the subset; its ``#/components/...`` references resolve in the subset."""
    root = {"components": _converted_components(), "allOf": [openapi_to_json_schema(schema)]}
    cls = jsonschema.validators.validator_for({"$schema": "https://json-schema.org/draft/2020-12/schema"})
    validator: Validator = cls(root)
    return validator


def github_response_schema(path: str, method: str, status: int) -> Json:
    return _response_content(path, method, status)["schema"]


@functools.cache
def _response_validator(path: str, method: str, status: int) -> Validator:
    return github_validator(github_response_schema(path, method, status))


def validate_github_response(path: str, method: str, status: int, body: Json) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``body`` matches the published response schema."""
    _response_validator(path, method, status).validate(body)


def validate_github_error(status: int, body: Json) -> None:
    """GitHub's error bodies: 422 is a ``validation-error``, the others a ``basic-error``."""
    name = "validation-error" if status == 422 else "basic-error"
    github_validator({"$ref": f"#/components/schemas/{name}"}).validate(body)


def github_request_problem(path: str, method: str, body: Json) -> str | None:
    """What is wrong with a request body by the operation's published request schema (the most relevant error),
    or None."""
    schema = github_subset()["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    problem = jsonschema.exceptions.best_match(github_validator(schema).iter_errors(body))
    return None if problem is None else problem.message
