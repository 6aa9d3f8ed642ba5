"""Links between the docs resolve: every relative Markdown link in README.md and docs/ names a file
or folder that exists, and an anchor where it gives one names a heading of that page (as GitHub
makes anchors of headings)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Code is not Markdown: fenced blocks hold no headings, and they and inline code spans no links.
FENCED = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(FENCED.pattern + r"|`[^`\n]*`", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCED.sub("", page.read_text()), re.M):
        base = anchor(heading.replace("`", ""))
        name, n = base, 0
        while name in found:  # a repeated heading gets -1, -2...
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def broken(page: Path) -> list[str]:
    out: list[str] = []
    for target in LINK.findall(CODE.sub("", page.read_text())):
        if re.match(r"^[a-z][a-z+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists():
            out.append(f"{target}: no such file")
        elif fragment and goal.is_file() and goal.suffix == ".md" and fragment not in anchors(goal):
            out.append(f"{target}: no such heading")
    return out


def test_the_anchor_of_a_heading_is_githubs():
    assert anchor("Signals: stopping and reloading") == "signals-stopping-and-reloading"
    assert anchor("A backend's own queue") == "a-backends-own-queue"
    assert anchor("The KV cache's use, by kind of backend") == "the-kv-caches-use-by-kind-of-backend"
    assert anchor("OpenAI (dialect: openai)") == "openai-dialect-openai"


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path: Path):
    (tmp_path / "b.md").write_text("# B\n\n## Two words\n")
    links = "[ok](#top) [ok](b.md#two-words) [bad](#none) [bad](b.md#b-c) [gone](c.md) `[code](d.md)`"
    (tmp_path / "a.md").write_text(f"# Top\n\n{links}\n\n```\n[fenced](e.md)\n```\n")
    assert broken(tmp_path / "a.md") == ["#none: no such heading", "b.md#b-c: no such heading", "c.md: no such file"]


def test_every_relative_link_in_the_docs_resolves():
    problems = [f"{page.relative_to(ROOT)}: {p}" for page in PAGES for p in broken(page)]
    assert problems == []
