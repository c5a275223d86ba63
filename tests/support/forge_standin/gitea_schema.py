"""Gitea's REST API as its swagger has it: the definitions the stand-in answers with and the bot sends.

Gitea has no such package here: :data:`GITEA_SCHEMAS` is a small hand-kept JSON Schema of the Gitea swagger
definitions used (``CommitStatus``, ``User``, ``PullRequest``, ``APIError``, ``Comment``, and
``IssueCommentOption`` for the bot's comment requests, which are validated against it). No registry package this
machine reaches (PyPI, npm, Debian) carries Gitea's swagger itself, so these stay hand-written; npm's
``gitea-js`` 1.23.0 carries TypeScript types generated from it, and its ``CreateIssueCommentOption`` and
``EditIssueCommentOption`` (``body: string``, required) are what ``IssueCommentOption`` says.
"""

from __future__ import annotations

from typing import Any

import jsonschema

GITEA_STATES = ("pending", "success", "error", "failure", "warning")

Json = Any


def _plain(**names: list[str]) -> dict[str, Any]:
    """An object whose properties are all of JSON's simple types, named per type (``string=["login", ...]``)."""
    return {"type": "object", "properties": {name: {"type": kind} for kind, group in names.items() for name in group}}


_GITEA_USER = _plain(
    integer=["id", "followers_count", "following_count", "starred_repos_count"],
    string=[
        "login",
        "login_name",
        "full_name",
        "email",
        "avatar_url",
        "html_url",
        "language",
        "last_login",
        "created",
        "location",
        "website",
        "description",
        "visibility",
        "username",
    ],
    boolean=["is_admin", "restricted", "active", "prohibit_login"],
)
_GITEA_BRANCH = _plain(string=["label", "ref", "sha"], integer=["repo_id"])

# Gitea's swagger (templates/swagger/v1_json.tmpl) is Swagger 2.0 with no "required" lists; the stand-in's
# bodies always carry every property listed here, so the schemas below require them all.
GITEA_SCHEMAS: dict[str, dict[str, Any]] = {
    "User": _GITEA_USER,
    "CommitStatus": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            # Gitea's CommitStatus carries the state in a field named "status" (CreateStatusOption calls it "state").
            "status": {"type": "string", "enum": list(GITEA_STATES)},
            "target_url": {"type": "string"},
            "description": {"type": "string"},
            "url": {"type": "string"},
            "context": {"type": "string"},
            "creator": _GITEA_USER,
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
        },
    },
    "PullRequest": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "url": {"type": "string"},
            "number": {"type": "integer"},
            "user": _GITEA_USER,
            "title": {"type": "string"},
            "body": {"type": "string"},
            "state": {"type": "string", "enum": ["open", "closed"]},
            "is_locked": {"type": "boolean"},
            "comments": {"type": "integer"},
            "html_url": {"type": "string"},
            "diff_url": {"type": "string"},
            "patch_url": {"type": "string"},
            "mergeable": {"type": "boolean"},
            "merged": {"type": "boolean"},
            "merged_at": {"type": ["string", "null"]},
            "merge_commit_sha": {"type": ["string", "null"]},
            "merged_by": {"anyOf": [{"type": "null"}, _GITEA_USER]},
            "base": _GITEA_BRANCH,
            "head": _GITEA_BRANCH,
            "merge_base": {"type": "string"},
            "created_at": {"type": "string"},
            "updated_at": {"type": "string"},
            "closed_at": {"type": ["string", "null"]},
        },
    },
    "APIError": {"type": "object", "properties": {"message": {"type": "string"}, "url": {"type": "string"}}},
    # The bot's requests for the pull request's comment: CreateIssueCommentOption and EditIssueCommentOption (both
    # just "body", required), and the Comment they answer with.
    "IssueCommentOption": {"type": "object", "properties": {"body": {"type": "string"}}},
    "Comment": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "body": {"type": "string"},
            "user": _GITEA_USER,
            "html_url": {"type": "string"},
            "issue_url": {"type": "string"},
            "created_at": {"type": "string"},
            "updated_at": {"type": "string"},
        },
    },
}


def validate_gitea(name: str, body: Json) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``body`` is a Gitea ``name`` object with every property."""

    def strict(schema: dict[str, Any]) -> dict[str, Any]:
        if "properties" not in schema:
            return schema
        props = {k: strict(v) if isinstance(v, dict) else v for k, v in schema["properties"].items()}
        return {**schema, "properties": props, "required": sorted(props)}

    jsonschema.Draft202012Validator(strict(GITEA_SCHEMAS[name])).validate(body)
