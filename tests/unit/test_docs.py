"""The docs a newcomer walks stay true to the repository: every file they name exists,
every link between them lands on a page and a heading, and the roles table in
docs/security.md is the one the server enforces."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirrorline.core.roles import METHOD_ROLES, Role

ROOT = Path(__file__).parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "ARCHITECTURE.md",
               ROOT / "spark" / "README.md",
               *(ROOT / "docs").glob("*.md")])

#: Pages linked from these docs that other branches of the same change write; checked like
#: every other page once they exist.
WRITTEN_ELSEWHERE = {"docs/configuration-keys.md", "docs/dashboards.md"}
#: Paths the docs name that are made by a command rather than committed: `make certs` and
#: `make compose-certs` write these.
GENERATED = {"deploy/kubernetes/certs", "deploy/compose/certs"}

_PATH = re.compile(r"(?<![\w/.$-])((?:services|spark|tests|deploy|bench|proto|docs)/[\w./*<>-]*)")
_MODULE = re.compile(r"(?<![\w/.-])([\w/]+\.py)\b")
#: Every Python module of the repository, by its path from the root.
MODULES = [str(p.relative_to(ROOT)) for d in ("services", "spark", "tests", "bench")
           for p in (ROOT / d).rglob("*.py")]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _prose(path: Path) -> str:
    return path.read_text()


def _mentioned_paths(text: str) -> set[str]:
    found = set()
    for match in _PATH.finditer(text):
        path = match.group(1).rstrip(".")
        # Stop at a placeholder or a wildcard: what precedes it must exist.
        path = re.split(r"[<*]", path, maxsplit=1)[0].rstrip("/.")
        if path.count("/") >= 1 or (ROOT / path).suffix == "":
            found.add(path)
    return found


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_file_the_docs_name_exists(doc: Path) -> None:
    text = _prose(doc)
    missing = sorted(p for p in _mentioned_paths(text)
                     if not (ROOT / p).exists() and p not in GENERATED
                     and not any(p.startswith(g + "/") for g in GENERATED)
                     and p not in WRITTEN_ELSEWHERE)
    assert not missing, f"{_name(doc)} names files that do not exist: {missing}"
    # Modules named by a shorter path (`core/config.py`, `flow_open.py`, `test_spark.py`):
    # some module of the repository must end so.
    unknown = sorted(m for m in set(_MODULE.findall(text))
                     if not any(p == m or p.endswith("/" + m) for p in MODULES))
    assert not unknown, f"{_name(doc)} names modules that do not exist: {unknown}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    out, fence = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_link_between_the_docs_lands_on_a_page_and_a_heading(doc: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(doc)):
        if re.match(r"[a-z]+:", target):
            continue  # a URL, not ours to check here
        file, _, anchor = target.partition("#")
        page = (doc.parent / file).resolve() if file else doc
        name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)
        if not page.exists():
            if name not in WRITTEN_ELSEWHERE:
                broken.append(target)
            continue
        if anchor and page.suffix == ".md" and anchor not in _anchors(page):
            broken.append(target)
    assert not broken, f"{_name(doc)} links nowhere: {broken}"


def test_the_roles_table_is_the_one_the_server_enforces() -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\| `(viewer|operator|admin)` \| (.*) \|$", line)
        if match:
            assert match.group(1) not in rows, f"the {match.group(1)} row appears twice"
            rows[match.group(1)] = set(re.findall(r"`(\w+)`", match.group(2)))
    admin = "/mirrorline.v1.Admin/"
    need = {role: {m.removeprefix(admin) for m, r in METHOD_ROLES.items()
                   if m.startswith(admin) and r is role}
            for role in (Role.VIEWER, Role.OPERATOR, Role.ADMIN)}
    assert rows == {"viewer": need[Role.VIEWER], "operator": need[Role.OPERATOR],
                    "admin": need[Role.ADMIN]}
