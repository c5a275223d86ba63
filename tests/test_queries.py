"""Every named query in one obvious place (``mergebot/db/queries/``), loaded whole. Pure: no database.

Rules checked here:
  1. Each store's queries are in the file named after the module that runs them: ``queries/<store>.sql`` holds
     only names ``mergebot/db/<store>.py`` asks for (``metrics.sql``: ``views.py``, which reads ``/metrics``), so
     a query is found where its caller says, and a query no caller names is noticed.
  2. Every ``.sql`` file of the folder is loaded, and a name defined twice, in one file or in two, is refused.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from mergebot.db.queries import QUERIES, QUERY_FILES, load_queries, parse_queries

DB = Path(__file__).resolve().parent.parent / "mergebot" / "db"
RUN_BY = {"metrics.sql": "views.py"}  # the read model of /metrics is read by the views' store


def _names(file: str) -> dict[str, str]:
    return parse_queries(resources.files("mergebot.db.queries").joinpath(file).read_text("utf-8"))


@pytest.mark.parametrize("file", QUERY_FILES)
def test_each_query_lives_with_the_module_that_runs_it(file: str) -> None:
    module = DB / RUN_BY.get(file, file.removesuffix(".sql") + ".py")
    text = module.read_text()
    names = _names(file)
    assert names, f"{file} holds no query"
    assert [n for n in names if not re.search(rf"[\"']{n}[\"']", text)] == [], f"not asked for by {module.name}"


def test_every_file_of_the_folder_is_loaded() -> None:
    folder = {p.name for p in (DB / "queries").glob("*.sql")}
    assert folder == set(QUERY_FILES)
    assert len(QUERIES) == sum(len(_names(f)) for f in QUERY_FILES) > 200


def test_a_name_is_defined_once() -> None:
    with pytest.raises(ValueError, match=r"is defined twice \(repos\.sql\)"):
        load_queries((*QUERY_FILES, "repos.sql"))  # one file loaded twice: each of its names in two files
    with pytest.raises(ValueError, match="'a' is defined twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
    with pytest.raises(ValueError, match="'a' has no body"):
        parse_queries("-- name: a\n\n-- name: b\nSELECT 1;\n")


def test_a_file_left_out_of_the_list_is_refused() -> None:
    with pytest.raises(ValueError, match=r"query files not in QUERY_FILES: metrics\.sql"):
        load_queries(tuple(f for f in QUERY_FILES if f != "metrics.sql"))
