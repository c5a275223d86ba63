"""The GitHub and Gitea stand-in (``server.py``); the names the tests use, re-exported."""

from tests.support.forge_standin.server import (
    ACCESS_TOKENS,
    COMBINED_STATUS,
    CREATE_STATUS,
    INSTALLATION,
    LIST_STATUSES,
    PULL,
    REPO,
    SUBSET_PATH,
    ForgeStandin,
    GitHubApp,
    PostedStatus,
    github_subset,
    validate_gitea,
    validate_github_error,
    validate_github_response,
)

__all__ = ["ACCESS_TOKENS", "COMBINED_STATUS", "CREATE_STATUS", "INSTALLATION", "LIST_STATUSES", "PULL", "REPO",
           "SUBSET_PATH", "ForgeStandin", "GitHubApp", "PostedStatus", "github_subset", "validate_gitea",
           "validate_github_error", "validate_github_response"]
