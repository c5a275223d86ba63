"""The guide for agents (``mergebot/guide.md``): the one text ``mergebot guide``, the MCP server and the docs show."""

from __future__ import annotations

from importlib import resources


def text() -> str:
    return resources.files("mergebot").joinpath("guide.md").read_text("utf-8")
