"""Every "SPEC n.n" the code cites names a section heading of docs/spec.md.

A citation of a missing section sends a reader nowhere; this test names the file and line of each.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "spec.md"
CITING_DIRS = ("backend", "chat_shell", "frontend", "tests", "bench", "scripts", "migrations")
CITING_SUFFIXES = {".py", ".js", ".html", ".css", ".sh", ".md", ".toml", ".ini", ".mako"}

# "SPEC 5.2", "SPEC 5.2.1-2" (a range of siblings), "SPEC §6.3".
CITATION = re.compile(r"SPEC\s+§?\s*(\d+(?:\.\d+)*)(?:\s*-\s*(\d+))?")
HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def spec_sections() -> set[str]:
    return set(HEADING.findall(SPEC.read_text(encoding="utf-8")))


def cited_sections(match: re.Match[str]) -> list[str]:
    first, range_end = match.group(1), match.group(2)
    if range_end is None:
        return [first]
    parent, _, start = first.rpartition(".")
    prefix = f"{parent}." if parent else ""
    return [f"{prefix}{n}" for n in range(int(start), int(range_end) + 1)]


def citations() -> list[tuple[str, int, str]]:
    found = []
    for top in CITING_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.suffix not in CITING_SUFFIXES:
                continue
            if "node_modules" in path.parts or "__pycache__" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for lineno, line in enumerate(text.splitlines(), start=1):
                for match in CITATION.finditer(line):
                    for section in cited_sections(match):
                        found.append((str(path.relative_to(ROOT)), lineno, section))
    return found


def test_the_code_cites_the_spec() -> None:
    # The collector itself must see the citations, or the test below passes on nothing.
    assert len(citations()) > 50


def test_every_citation_names_a_section_of_docs_spec() -> None:
    sections = spec_sections()
    missing = [
        f"{path}:{lineno}: SPEC {section}" for path, lineno, section in citations() if section not in sections
    ]
    assert not missing, "citations of sections missing from docs/spec.md:\n" + "\n".join(missing)
