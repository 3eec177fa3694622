"""The docs cannot drift from the code: every repository path they name in backticks exists,
every relative Markdown link (and its #anchor) resolves, and the README stays short.

Modules move; when one does, this test names each doc line that still points at the old place.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
PATH_PREFIXES = ("backend/", "chat_shell/", "frontend/", "bench/", "scripts/", "migrations/", "tests/")
PATH_PREFIXES += ("docs/", "deploy/")

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
MERMAID = re.compile(r"^```mermaid\n(.*?)^```", re.MULTILINE | re.DOTALL)
DIAGRAM_PATH = re.compile(r"(?<![\w/])(?:" + "|".join(map(re.escape, PATH_PREFIXES)) + r")[\w./-]*")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
REFERENCE = re.compile(r"^\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.MULTILINE)


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(path: Path) -> str:
    """The file without its fenced code blocks (commands there are examples, not references)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def named_paths(text: str) -> list[str]:
    """Backticked repository paths: `backend/db.py`, `tests/support/`, `chat_shell/x.py::name`."""
    found = []
    for code in INLINE_CODE.findall(text):
        if code.startswith(PATH_PREFIXES) and " " not in code:
            found.append(code.split("::", 1)[0])
    return found


def exists(path: str) -> bool:
    # A placeholder (`frontend/locale/<locale>/...`) names the folder before it.
    if "<" in path:
        return (ROOT / path.split("<", 1)[0]).is_dir()
    return (ROOT / path).exists()


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(heading) for heading in HEADING.findall(prose(path))}


def link_problem(source: Path, target: str) -> str | None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    file_part, _, anchor = target.partition("#")
    linked = (source.parent / file_part).resolve() if file_part else source
    if not linked.exists():
        shown = linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked
        return f"{target}: {shown} does not exist"
    if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
        return f"{target}: no heading of {linked.name} has the anchor #{anchor}"
    return None


def diagram_paths(path: Path) -> list[str]:
    """Repository paths written in the labels of the doc's Mermaid diagrams."""
    blocks = MERMAID.findall(path.read_text(encoding="utf-8"))
    return [found.rstrip(".,") for block in blocks for found in DIAGRAM_PATH.findall(block)]


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    named = named_paths(prose(doc)) + diagram_paths(doc)
    missing = sorted({path for path in named if not exists(path)})
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_a_doc_resolves(doc: Path) -> None:
    text = prose(doc)
    targets = LINK.findall(text) + REFERENCE.findall(text)
    broken = [problem for target in targets if (problem := link_problem(doc, target))]
    assert not broken, f"{doc.relative_to(ROOT)} has broken links: {broken}"


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; at most {README_MAX_LINES}"


def test_the_checks_see_paths_and_links() -> None:
    """The scanners find what the docs write, so an empty scan cannot pass for a clean one."""
    text = "See `backend/db.py` and `tests/x.py::test_y`, not `/api/x`.\n```sh\n`scripts/nope.sh`\n```\n"
    assert named_paths(FENCE.sub("", text)) == ["backend/db.py", "tests/x.py"]
    assert slug("Upgrades (migrations)") == "upgrades-migrations"
    assert slug("The `chat-shell` command") == "the-chat-shell-command"
    assert link_problem(ROOT / "README.md", "docs/nowhere.md") is not None
    assert link_problem(ROOT / "README.md", "SECURITY.md") is None
