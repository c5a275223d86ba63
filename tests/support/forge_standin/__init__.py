"""A local stand-in for the bits of GitHub's and Gitea's REST APIs that mergebot calls, on their real wire format.

GitHub responses are built from the documented examples of GitHub's published OpenAPI description
(``github_schema.py`` loads the extracted subset) with the relevant fields filled in, so their shapes are
GitHub's; :func:`~tests.support.forge_standin.github_schema.validate_github_response` checks a body against the
published response schema. Gitea's definitions are a small hand-kept JSON Schema (``gitea_schema.py``).

A pull request registered with :meth:`ForgeStandin.add_pull` is reported merged (GitHub: ``state`` "closed",
``merged`` true) as soon as its head commit is an ancestor of, or equal to, the tip of its base branch in the
real bare repository the stand-in was given: that is how a forge closes a pull request whose commits were
pushed to the base branch.

Modules: ``github_schema`` and ``gitea_schema`` (the schemas, no server), ``core`` (the shared state and
replies), ``github``, ``gitea`` and ``comments`` (the routes of each), ``server`` (:class:`ForgeStandin`).

Usage::

    with ForgeStandin(token="t", bare_repo=path) as forge:
        forge.add_pull("acme", "widgets", 7, head_ref="feature", head_sha=sha, base_ref="main")
        ...  # point a client at forge.url
        forge.statuses(sha), forge.requests, forge.fail_next(2, 502)
"""

from tests.support.forge_standin.core import GitHubApp, PostedStatus, RecordedRequest
from tests.support.forge_standin.server import ForgeStandin

__all__ = ["ForgeStandin", "GitHubApp", "PostedStatus", "RecordedRequest"]
