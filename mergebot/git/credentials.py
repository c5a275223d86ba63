"""Where a forge repository's token comes from, for git (the mirror's fetches, the landing push) and for the forge's
API (statuses) alike: one place, so both always use the same one.

Two kinds:
  * a personal token, read from the environment variable the repository names (``forge_token_env``); it never
    changes, and a 401 is for an operator to mend;
  * a GitHub App: a JSON Web Token signed (RS256) with the App's private key, read from the variable the
    repository names (``github_app_key_env``), mints an installation token (``POST
    /app/installations/ID/access_tokens``; the installation is found from the repository, ``GET
    /repos/OWNER/NAME/installation``, when none is configured). GitHub's installation tokens live an hour: one is
    cached per installation and process until ``RENEW_BEFORE`` before it expires, and minted again at once after
    a 401 (``renew``, once per stale token, however many callers saw it fail).

Tokens are never written anywhere: git gets them through environment variables (``mirror.Remote``), the API
clients in a header. The calls here block; async code runs them in a thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from mergebot import messages as say
from mergebot.errors import MergebotError

JWT_LIFETIME_S = 540  # GitHub accepts at most ten minutes; the clock of a machine may be a little ahead of it
JWT_BACKDATE_S = 60  # ... or behind it: "iat" a minute in the past, as GitHub advises
RENEW_BEFORE_S = 300  # an installation token is minted again this long before it expires


class CredentialError(MergebotError):
    """No token could be had for a forge repository (a variable unset, a key GitHub refuses, GitHub unreachable)."""

    status = 502
    code = "forge_credentials"


@dataclass(frozen=True)
class App:
    """A GitHub App installation a repository authenticates as."""

    app_id: int
    key_env: str  # the variable holding the App's private key (PEM), never the key itself
    api_url: str  # https://api.github.com, or an Enterprise Server's .../api/v3
    repo: str  # owner/name: the installation is found from it when ``installation_id`` is not given
    installation_id: int | None = None


def app_jwt(app_id: int, private_key: str, now: float) -> str:
    """The JWT that authenticates as the App itself: issued by the App id, valid for nine minutes."""
    import jwt

    claims = {"iat": int(now) - JWT_BACKDATE_S, "exp": int(now) + JWT_LIFETIME_S, "iss": str(app_id)}
    return str(jwt.encode(claims, private_key, algorithm="RS256"))


def check_key(pem: str) -> None:
    """Raise ValueError unless ``pem`` is an RSA private key that can sign a JWT."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(pem.encode(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(say.APP_KEY_NOT_RSA)


class AppTokens:
    """The installation tokens of one App installation in this process: minted, cached, renewed. Thread-safe."""

    def __init__(self, app: App, *, environ: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time,
                 http: httpx.Client | None = None) -> None:
        self.app = app
        self._environ = environ if environ is not None else os.environ
        self._clock = clock
        self._http = http or httpx.Client(timeout=15.0, headers={"User-Agent": "mergebot"})
        self._lock = threading.Lock()
        self._installation = app.installation_id
        self._token: str | None = None
        self._expires = 0.0
        self.minted = 0  # how many tokens this process minted: the tests and the logs count them

    def token(self) -> str:
        with self._lock:
            if self._token is None or self._clock() >= self._expires - RENEW_BEFORE_S:
                self._mint()
            assert self._token is not None
            return self._token

    def renew(self, stale: str) -> str:
        """A token that was refused (401): mint a new one, unless another caller already replaced it."""
        with self._lock:
            if self._token is None or self._token == stale:
                self._mint()
            assert self._token is not None
            return self._token

    def current(self) -> str | None:
        """The cached token, if any (for masking: it is a secret while it lives)."""
        return self._token

    def _jwt(self) -> str:
        pem = self._environ.get(self.app.key_env)
        if not pem:
            raise CredentialError(say.app_key_unset(self.app.key_env))
        try:
            return app_jwt(self.app.app_id, pem, time.time())  # GitHub's clock, not the cache's (``clock``)
        except Exception as e:  # a malformed key: say which variable, never its value
            raise CredentialError(say.app_key_unusable(self.app.key_env, e)) from e

    def _call(self, method: str, path: str, doing: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._jwt()}", "Accept": "application/vnd.github+json",
                   "X-GitHub-Api-Version": "2022-11-28"}
        try:
            r = self._http.request(method, self.app.api_url.rstrip("/") + path, headers=headers)
        except httpx.HTTPError as e:
            raise CredentialError(say.forge_unreachable("GitHub", doing, repr(e))) from e
        if r.is_error:
            try:
                why = r.json().get("message")
            except (ValueError, AttributeError):
                why = None
            raise CredentialError(say.forge_answered("GitHub", r.status_code, doing, why or r.reason_phrase),
                                  http_status=r.status_code)
        body = r.json()
        if not isinstance(body, dict):
            raise CredentialError(say.forge_sent_no("GitHub", "object", doing))
        return body

    def _mint(self) -> None:
        if self._installation is None:
            owner, _, name = self.app.repo.partition("/")
            found = self._call("GET", f"/repos/{owner}/{name}/installation",
                               f"finding App {self.app.app_id}'s installation on {self.app.repo}")
            self._installation = int(found["id"])
        got = self._call("POST", f"/app/installations/{self._installation}/access_tokens",
                         f"minting an installation token for App {self.app.app_id}")
        try:
            token = str(got["token"])
            expires = datetime.fromisoformat(str(got["expires_at"]).replace("Z", "+00:00")).timestamp()
        except (KeyError, ValueError) as e:
            raise CredentialError(say.NO_INSTALLATION_TOKEN) from e
        self._token, self._expires = token, expires
        self.minted += 1


_apps: dict[App, AppTokens] = {}
_apps_lock = threading.Lock()


def app_tokens(app: App) -> AppTokens:
    """The process's one cache of ``app``'s tokens (every caller of one installation shares it)."""
    with _apps_lock:
        if app not in _apps:
            _apps[app] = AppTokens(app)
        return _apps[app]


def live_tokens() -> list[str]:
    """Every installation token this process holds now: secrets like any other, to be masked."""
    with _apps_lock:
        return [t for t in (a.current() for a in _apps.values()) if t]


@dataclass(frozen=True)
class Credentials:
    """A repository's token source: an App's installation tokens, or a personal token's variable."""

    token_env: str | None = None
    app: App | None = None

    @property
    def kind(self) -> str:
        return "app" if self.app is not None else "token"

    def token(self) -> str | None:
        if self.app is not None:
            return app_tokens(self.app).token()
        return os.environ.get(self.token_env) if self.token_env else None

    def renew(self, stale: str | None) -> str | None:
        """A fresh token after ``stale`` was refused; None when this kind cannot renew (a personal token)."""
        if self.app is None or stale is None:
            return None
        return app_tokens(self.app).renew(stale)


def _field(repo: object, name: str) -> Any:
    return repo.get(name) if isinstance(repo, Mapping) else getattr(repo, name, None)


def for_repo(repo: object) -> Credentials:
    """The credentials of a repository (a ``Repo``, or the columns of one as a mapping)."""
    app_id = _field(repo, "github_app_id")
    if app_id:
        installation = _field(repo, "github_installation_id")
        return Credentials(app=App(app_id=int(app_id), key_env=str(_field(repo, "github_app_key_env")),
                                   api_url=str(_field(repo, "forge_api_url") or "https://api.github.com"),
                                   repo=str(_field(repo, "forge_repo")),
                                   installation_id=int(installation) if installation else None))
    return Credentials(token_env=_field(repo, "forge_token_env"))


AUTH_FAILED = ("returned error: 401", "Authentication failed", "could not read Username", "HTTP 401")


def refused_credentials(git_error: str) -> bool:
    """Whether git's error text says the remote refused our credentials (so a renewed token may succeed)."""
    return any(s in git_error for s in AUTH_FAILED)
