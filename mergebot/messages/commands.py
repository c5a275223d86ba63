"""Answers to commands in a pull request's comments (``mergebot.forge.commands``).

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

# -- commands in a pull request's comments (mergebot.forge.commands) ------------------------------------------


def command_unknown(name: str, names: tuple[str, ...]) -> str:
    return f"`@mergebot {name[:40]}` is no command of mine; the commands are " + ", ".join(
        f"`@mergebot {n}`" for n in names) + "."


def command_unlinked(sender: str | None, forge: str) -> str:
    return (f"{sender!r} is not linked to a Mergebot agent, so its commands change nothing (only `@mergebot why` "
            f"is for everyone). An admin links it with `mergebot agent link NAME --{forge} {sender}`.")


def command_needs_manager(name: str) -> str:
    return (f"`@mergebot {name}` is for leads and admins only: an owner must not move its own work up the queue. "
            "Nothing changed.")


def command_priority_number(low: int, high: int) -> str:
    return f"`@mergebot priority N` takes a whole number from {low} to {high}. Nothing changed."


def command_not_owner(name: str) -> str:
    return (f"`@mergebot {name}` is for the pull request's owner (the agent whose claim it is), or a lead or admin. "
            "Nothing changed.")


def command_done(login: str | None, name: str, what: str) -> str:
    return f"@{login} `@mergebot {name}`: {what}"


def command_refused(login: str | None, name: str, why: str) -> str:
    return f"@{login} `@mergebot {name[:40]}` refused: {why}"
