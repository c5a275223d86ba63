"""Server-rendered pages for reviewers and operators, served by ``mergebot serve`` (FastAPI + Jinja2).

``routes`` is the router (login, the pages, the live queue stream), ``session`` the login cookie and CSRF
checks, ``deps`` the viewer and site dependencies every page takes, ``mergebot.db.pages`` the bounded reads
(SQL in ``mergebot/db/queries/pages.sql``), ``present`` the pure shaping of what the templates show, ``diffstat`` the
diff summaries read from git, ``live`` the server-sent event stream, and ``render`` the templates and static
files. Every role may read; a visitor without a token sees only /login.
"""
