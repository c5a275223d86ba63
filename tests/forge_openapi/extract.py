"""Extract the few GitHub REST operations the forge stand-in serves from GitHub's OpenAPI description.

Source: the ``@octokit/openapi`` npm package, version 23.0.2 (file ``generated/api.github.com.json``,
OpenAPI 3.0.3; GitHub's own description with Octokit extensions). The output, ``github_subset.json``
beside this script, keeps for each operation its responses and request body as published, plus every
component (schema, example, response, header) they reach through ``$ref``, copied verbatim under the
same ``#/components/...`` pointers, so the ``$ref`` strings still resolve inside the subset.
Only ``description`` prose inside schemas is dropped to keep the file small.

Regenerate (needs npm once; the tests themselves read only the subset)::

    cd /tmp && npm pack @octokit/openapi@23.0.2 && tar xzf octokit-openapi-23.0.2.tgz
    python tests/forge_openapi/extract.py /tmp/package
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# (path, method) pairs served by tests/support/forge_standin/.
OPERATIONS: list[tuple[str, str]] = [
    ("/repos/{owner}/{repo}", "get"),
    ("/repos/{owner}/{repo}/statuses/{sha}", "post"),
    ("/repos/{owner}/{repo}/commits/{ref}/statuses", "get"),
    ("/repos/{owner}/{repo}/commits/{ref}/status", "get"),
    ("/repos/{owner}/{repo}/pulls/{pull_number}", "get"),
    # GitHub App authentication: the repository's installation, and an installation token minted with the JWT
    ("/repos/{owner}/{repo}/installation", "get"),
    ("/app/installations/{installation_id}/access_tokens", "post"),
    # check runs (an App's only): created on a pull request's head commit, then updated as the verdict moves
    ("/repos/{owner}/{repo}/check-runs", "post"),
    ("/repos/{owner}/{repo}/check-runs/{check_run_id}", "patch"),
    # the one living comment on a pull request: found by its marker, posted once, then edited
    ("/repos/{owner}/{repo}/issues/{issue_number}/comments", "get"),
    ("/repos/{owner}/{repo}/issues/{issue_number}/comments", "post"),
    ("/repos/{owner}/{repo}/issues/comments/{comment_id}", "patch"),
]
# Error bodies the stand-in sends (401 Bad credentials, 404, 422 Validation Failed).
EXTRA_SCHEMAS = ["basic-error", "validation-error"]
OPERATION_KEYS = ["operationId", "summary", "requestBody", "responses"]
OUT = Path(__file__).with_name("github_subset.json")


def _refs(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.append(ref)
        for value in node.values():
            found.extend(_refs(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_refs(value))
    return found


def _strip_prose(node: Any, *, in_schema: bool) -> Any:
    """Drop ``description`` strings inside schemas (not property names that happen to be "description")."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if in_schema and key == "description" and isinstance(value, str):
                continue
            if in_schema and key == "properties" and isinstance(value, dict):
                out[key] = {name: _strip_prose(sub, in_schema=True) for name, sub in value.items()}
            else:
                out[key] = _strip_prose(value, in_schema=in_schema or key == "schema")
        return out
    if isinstance(node, list):
        return [_strip_prose(value, in_schema=in_schema) for value in node]
    return node


def extract(package_dir: Path) -> dict[str, Any]:
    spec = json.loads((package_dir / "generated" / "api.github.com.json").read_text())
    version = json.loads((package_dir / "package.json").read_text())["version"]
    paths: dict[str, dict[str, Any]] = {}
    for path, method in OPERATIONS:
        op = spec["paths"][path][method]
        paths.setdefault(path, {})[method] = {k: op[k] for k in OPERATION_KEYS if k in op}

    components: dict[str, dict[str, Any]] = {}
    pending = _refs(paths) + [f"#/components/schemas/{name}" for name in EXTRA_SCHEMAS]
    while pending:
        ref = pending.pop()
        parts = ref.removeprefix("#/").split("/")
        if parts[0] != "components" or len(parts) != 3:
            raise ValueError(f"unexpected $ref {ref!r}")
        kind, name = parts[1], parts[2]
        if name in components.get(kind, {}):
            continue
        node = spec["components"][kind][name]
        components.setdefault(kind, {})[name] = node
        pending.extend(_refs(node))

    schemas = {name: _strip_prose(s, in_schema=True) for name, s in components.get("schemas", {}).items()}
    components["schemas"] = schemas
    return {
        "source": {
            "package": "@octokit/openapi",
            "version": version,
            "file": "generated/api.github.com.json",
            "openapi": spec["openapi"],
        },
        "paths": _strip_prose(paths, in_schema=False),
        "components": {kind: dict(sorted(items.items())) for kind, items in sorted(components.items())},
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    subset = extract(Path(argv[1]))
    OUT.write_text(json.dumps(subset, indent=1, sort_keys=False) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {sum(map(len, subset['components'].values()))} components)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
