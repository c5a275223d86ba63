"""Which values the bot holds are secret, so that none of them is ever stored, shown or sent (``verifier.mask``).

The secrets, by the rules every process applies to its own environment (``serve``, a remote verifier worker, the
command line):
  * the variables each repository names (``webhook_secret_env``, ``forge_token_env``, ``github_app_key_env``),
    given by the caller, who reads them from the database, and the GitHub App installation tokens it holds;
  * ``MERGEBOT_TOKEN`` and ``PGPASSWORD``;
  * every variable whose name ends in ``_TOKEN``, ``_SECRET``, ``_PASSWORD`` or ``_KEY``;
  * the password of every database URL given (``MERGEBOT_DATABASE_URL``, and any other the caller connects with).
Only values of ``verifier.mask.MIN_LENGTH`` (8) characters or more are masked: shorter ones would mask ordinary
words, and a secret that short is no secret. Pure but for reading the mapping it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from verifier.mask import MIN_LENGTH, Masker

SUFFIXES = ("_TOKEN", "_SECRET", "_PASSWORD", "_KEY")
ALWAYS = ("MERGEBOT_TOKEN", "PGPASSWORD")


def url_password(url: str) -> str | None:
    """The password in a libpq URL or keyword string, if it has one."""
    if not url:
        return None
    from psycopg.conninfo import conninfo_to_dict

    try:
        value = conninfo_to_dict(url).get("password")
    except Exception:  # a URL libpq cannot read holds no password we could find either
        return None
    return str(value) if value else None


def secret_values(environ: Mapping[str, str], *, named: Iterable[str] = (), urls: Iterable[str] = (),
                  values: Iterable[str] = ()) -> list[str]:
    """The values that must never appear in a text the bot keeps or sends (see the module's rules); ``values``
    are secrets the caller holds outside any variable (a GitHub App's installation tokens)."""
    names = set(named) | set(ALWAYS) | {k for k in environ if k.upper().endswith(SUFFIXES)}
    found = {environ[n] for n in names if environ.get(n)} | set(values)
    found |= {p for p in (url_password(u) for u in urls) if p}
    return sorted(v for v in found if len(v) >= MIN_LENGTH)


def masker(environ: Mapping[str, str], *, named: Iterable[str] = (), urls: Iterable[str] = ()) -> Masker:
    return Masker(secret_values(environ, named=named, urls=urls))
