"""The facts of a delivery the merge queue acts on: :func:`to_event` reads a push, a pull request or a
deletion into a forge-neutral :class:`ForgeEvent`, :func:`to_pull_comment` a comment that may hold a command.
Each field read is checked for its shape, so a malformed payload is a 400 and never a ``KeyError``.

Part of ``mergebot.forge.sansio``: no I/O here either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mergebot.forge.sansio.delivery import Delivery
from mergebot.forge.sansio.headers import WebhookError
from mergebot.forge.sansio.strict_json import json_type

MAX_REF_BYTES = 1024

# Pull-request actions that (re)present a head commit to be landed.
_CANDIDATE_PR_ACTIONS = frozenset({"opened", "synchronize", "reopened"})
# Gitea/Forgejo spell some actions differently from GitHub.
_PR_ACTION_ALIASES = {"synchronized": "synchronize"}
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# C0 controls, DEL and C1 controls (Unicode category Cc).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class ForgeEvent:
    """The forge-neutral facts of a delivery that the merge queue acts on.

    ``ref`` is always a full ref kept verbatim (never shell- or git-parsed):
    the pushed ref, ``refs/heads/<head.ref>`` for a pull request, or
    ``refs/heads|tags/<name>`` built from a ``delete`` event's short name and
    ``ref_type``. ``head_sha`` is the pull request's head, or a push's
    ``after`` (all zeros for a deletion). ``sender`` is ``sender.login``.

    ``candidate`` is True only for a push to ``refs/heads/...`` that is not a
    deletion, and for a pull request opened/synchronize/reopened whose head
    branch lives in ``repository`` itself (not a fork). Everything else,
    tags, deletions, closed pull requests, pings and unknown events, is False.

    A fact an event does not carry is None (or False): the defaults, so each parser names only what it found.
    """

    forge: str
    event: str
    action: str | None = None
    repository: str | None = None
    ref: str | None = None
    before: str | None = None
    after: str | None = None
    sender: str | None = None
    pr_number: int | None = None
    head_sha: str | None = None
    base_ref: str | None = None
    created: bool = False
    deleted: bool = False
    forced: bool = False
    is_tag: bool = False
    candidate: bool = False


def _bad(field: str, problem: str) -> WebhookError:
    return WebhookError(400, f"payload field {field} {problem}")


def _obj(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise _bad(path, "is missing" if value is None else f"must be an object, not {json_type(value)}")
    return value


def _str(parent: dict[str, Any], key: str, path: str) -> str:
    value = parent.get(key)
    if not isinstance(value, str):
        raise _bad(path, "is missing" if value is None else f"must be a string, not {json_type(value)}")
    return value


def _text(value: str, path: str) -> str:
    """A non-empty, printable, UTF-8-encodable string of at most MAX_REF_BYTES bytes."""
    if not value:
        raise _bad(path, "is empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise _bad(path, "is not valid Unicode (lone surrogate)") from None
    if size > MAX_REF_BYTES:
        raise _bad(path, f"is longer than {MAX_REF_BYTES} bytes")
    if _CONTROL.search(value) is not None:
        raise _bad(path, "contains control characters")
    return value


def _ref(value: str, path: str) -> str:
    """A ref, kept verbatim: only emptiness, length and control characters are refused."""
    return _text(value, path)


def _full_ref(prefix: str, short: str, path: str) -> str:
    """``prefix + short`` for a short branch/tag name, both parts checked."""
    return _ref(prefix + _text(short, path), path)


def _sha(parent: dict[str, Any], key: str, path: str) -> str:
    value = _str(parent, key, path)
    if _SHA.fullmatch(value) is None:
        raise _bad(path, "must be 40 or 64 lowercase hex digits")
    return value


def _bool(parent: dict[str, Any], key: str, path: str) -> bool | None:
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise _bad(path, f"must be a boolean, not {json_type(value)}")
    return value


def _repository(payload: dict[str, Any]) -> str:
    repo = _obj(payload, "repository", "repository")
    name = _text(_str(repo, "full_name", "repository.full_name"), "repository.full_name")
    owner, slash, short = name.partition("/")
    if not slash or not owner or not short or "/" in short or name != name.strip():
        raise _bad("repository.full_name", "must look like 'owner/name'")
    return name


def _sender(payload: dict[str, Any]) -> str | None:
    """sender.login; None if there is no sender. (GitHub's pusher has no login.)"""
    if payload.get("sender") is None:
        return None
    sender = _obj(payload, "sender", "sender")
    return _text(_str(sender, "login", "sender.login"), "sender.login")


def _lenient(payload: dict[str, Any]) -> tuple[str | None, str | None]:
    """Repository and sender for events we only record: never an error."""
    try:
        repository: str | None = _repository(payload)
    except WebhookError:
        repository = None
    try:
        sender = _sender(payload)
    except WebhookError:
        sender = None
    return repository, sender


def _is_zero(sha: str) -> bool:
    return sha.count("0") == len(sha)


def _push(delivery: Delivery) -> ForgeEvent:
    payload = delivery.payload
    repository = _repository(payload)
    ref = _ref(_str(payload, "ref", "ref"), "ref")
    before = _sha(payload, "before", "before")
    after = _sha(payload, "after", "after")
    if len(before) != len(after):
        raise _bad("before/after", "mix 40- and 64-digit object names")
    # GitHub states these; Gitea/Forgejo do not, so derive them from the
    # all-zero object name. A stated flag can only add to what the shas say.
    created = bool(_bool(payload, "created", "created")) or _is_zero(before)
    deleted = bool(_bool(payload, "deleted", "deleted")) or _is_zero(after)
    forced = bool(_bool(payload, "forced", "forced"))
    is_branch = ref.startswith("refs/heads/")
    return _event(delivery, repository, ref=ref, before=before, after=after, head_sha=after, created=created,
                  deleted=deleted, forced=forced, is_tag=ref.startswith("refs/tags/"),
                  candidate=is_branch and not deleted)


def _pull_request(delivery: Delivery) -> ForgeEvent:
    payload = delivery.payload
    repository = _repository(payload)
    raw_action = _text(_str(payload, "action", "action"), "action")
    action = _PR_ACTION_ALIASES.get(raw_action, raw_action)
    number = payload.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        raise _bad("number", "must be a positive integer")
    pr = _obj(payload, "pull_request", "pull_request")
    head = _obj(pr, "head", "pull_request.head")
    base = _obj(pr, "base", "pull_request.base")
    head_ref = _full_ref("refs/heads/", _str(head, "ref", "pull_request.head.ref"), "pull_request.head.ref")
    base_ref = _full_ref("refs/heads/", _str(base, "ref", "pull_request.base.ref"), "pull_request.base.ref")
    head_sha = _sha(head, "sha", "pull_request.head.sha")
    # A pull request from another repository (a fork, or one since deleted:
    # head.repo null) names a branch that does not exist in `repository`, so
    # it is never a candidate: landing it would graft the fork's branch name
    # and commit onto this repository.
    head_repo = head.get("repo")
    head_repo_name = head_repo.get("full_name") if isinstance(head_repo, dict) else None
    same_repository = isinstance(head_repo_name, str) and head_repo_name.lower() == repository.lower()
    # GitHub's synchronize carries the old and new head; other actions do not.
    before = _sha(payload, "before", "before") if payload.get("before") is not None else None
    after = _sha(payload, "after", "after") if payload.get("after") is not None else None
    return _event(delivery, repository, action=action, ref=head_ref, before=before, after=after, pr_number=number,
                  head_sha=head_sha, base_ref=base_ref, candidate=action in _CANDIDATE_PR_ACTIONS and same_repository)


def _event(delivery: Delivery, repository: str, **fields: Any) -> ForgeEvent:
    """What every parsed event says alike: its forge and kind, the repository, and who sent it."""
    return ForgeEvent(delivery.forge, delivery.event, repository=repository, sender=_sender(delivery.payload),
                      **fields)


def _delete(delivery: Delivery) -> ForgeEvent:
    """A ``delete`` event: a short ref name plus ``ref_type`` (Gitea/Forgejo and GitHub alike)."""
    payload = delivery.payload
    repository = _repository(payload)
    name = _str(payload, "ref", "ref")
    ref_type = _str(payload, "ref_type", "ref_type")
    if ref_type == "branch":
        prefix = "refs/heads/"
    elif ref_type == "tag":
        prefix = "refs/tags/"
    else:
        raise _bad("ref_type", "must be 'branch' or 'tag'")
    # Tolerate a full ref name too, should a forge ever send one.
    ref = _ref(name, "ref") if name.startswith(prefix) else _full_ref(prefix, name, "ref")
    return _event(delivery, repository, ref=ref, deleted=True, is_tag=ref_type == "tag")


def _other(delivery: Delivery) -> ForgeEvent:
    """ping and every event the merge queue does not act on: recorded, never refused."""
    repository, sender = _lenient(delivery.payload)
    return ForgeEvent(delivery.forge, delivery.event, repository=repository, sender=sender)


@dataclass(frozen=True)
class PullComment:
    """A comment written on a pull request (an ``issue_comment`` event on GitHub and Gitea alike): where, by whom,
    and its text, which may hold a command for the bot (``mergebot.forge.commands``)."""

    forge: str
    repository: str
    number: int
    comment_id: int
    body: str
    sender: str | None
    review: bool = False  # an approving review, read as ``@mergebot approve`` from its author (``to_pull_review``)


APPROVE_COMMAND = "@mergebot approve"


def to_pull_review(delivery: Delivery) -> PullComment | None:
    """An approving review of a pull request, as the command it amounts to: ``@mergebot approve`` from the review's
    author (GitHub: ``pull_request_review`` submitted with state ``approved``; Gitea and Forgejo:
    ``pull_request_review_approved``). None for any other review (a comment, changes requested, dismissed); a
    malformed payload is a 400. Who may approve is the command's rule (``mergebot.forge.commands.refusal``)."""
    payload = delivery.payload
    if delivery.event == "pull_request_review":
        review = _obj(payload, "review", "review")
        state = review.get("state")
        if payload.get("action") != "submitted" or not isinstance(state, str) or state.lower() != "approved":
            return None
        review_id = review.get("id")
        user = review.get("user")
        login = _text(_str(user, "login", "review.user.login"), "review.user.login") if isinstance(user, dict) \
            else _sender(payload)
    elif delivery.event == "pull_request_review_approved":
        review_id, login = 0, _sender(payload)
    else:
        return None
    repository = _repository(payload)
    pull = _obj(payload, "pull_request", "pull_request")
    number = pull.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        raise _bad("pull_request.number", "must be a positive integer")
    if not isinstance(review_id, int) or isinstance(review_id, bool):
        raise _bad("review.id", "must be an integer")
    return PullComment(delivery.forge, repository, number, review_id, APPROVE_COMMAND, login, review=True)


def to_pull_comment(delivery: Delivery) -> PullComment | None:
    """A new comment on a pull request; None for any other issue comment (on an issue, edited, deleted). A
    malformed payload is a 400."""
    payload = delivery.payload
    if delivery.event != "issue_comment" or payload.get("action") != "created":
        return None
    repository = _repository(payload)
    issue = _obj(payload, "issue", "issue")
    if not (issue.get("pull_request") or payload.get("is_pull") is True):
        return None  # GitHub marks a pull request's issue with pull_request; Gitea says is_pull
    number = issue.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        raise _bad("issue.number", "must be a positive integer")
    comment = _obj(payload, "comment", "comment")
    comment_id = comment.get("id")
    if not isinstance(comment_id, int) or isinstance(comment_id, bool):
        raise _bad("comment.id", "must be an integer")
    body = comment.get("body")
    if not isinstance(body, str):
        raise _bad("comment.body", "must be a string")
    return PullComment(delivery.forge, repository, number, comment_id, body[:10_000], _sender(payload))


def to_event(delivery: Delivery) -> ForgeEvent:
    """Normalise a delivery; a malformed push/pull_request/delete payload is a 400."""
    if delivery.event == "push":
        return _push(delivery)
    if delivery.event == "pull_request":
        return _pull_request(delivery)
    if delivery.event == "delete":
        return _delete(delivery)
    return _other(delivery)
