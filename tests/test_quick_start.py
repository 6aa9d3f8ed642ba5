"""The README's Quick start works as written, from a fresh checkout."""

import re
from pathlib import Path

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_the_quick_start_installs_what_its_examples_import() -> None:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks
    for block in blocks:
        before = section[: section.index(block)]
        for module in re.findall(r"^(?:from|import) (\w+)", block, re.M):
            assert module == "gateway" or re.search(rf"pip install [^\n`]*\b{module}\b", before), module


def test_ci_runs_exactly_the_test_command_the_readme_gives():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [c.strip() for c in re.findall(r"```sh\n(.*?)```", section, re.S) if "pytest" in c]
    assert len(commands) == 1
    ci = (Path(__file__).parent.parent / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == commands[0]
