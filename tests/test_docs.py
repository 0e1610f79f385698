"""README and docs/: every relative link resolves, and every command and flag they show exists."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from autoscaler.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"```[a-z]*\n(.*?)```|`([^`\n]+)`", re.DOTALL)
# A command as typed in code: at a line's start or after "&&" (not `kubectl -n vllm-autoscaler ...`).
COMMAND = re.compile(r"(?:^\s*|&& )vllm-autoscaler ([a-z][a-z-]*[^\n|]*)", re.MULTILINE)


def _subcommands() -> dict[str, set[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: set(p._option_string_actions) for name, p in sub.choices.items()}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(ROOT)}: link to {target} resolves to nothing"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_and_flag_shown_exists(page: Path) -> None:
    commands = _subcommands()
    text = page.read_text(encoding="utf-8").replace("\\\n", " ")
    code = "\n".join(block or span for block, span in CODE.findall(text))
    for match in COMMAND.finditer(code):
        words = match.group(1).split("#")[0].split(">")[0].split("|")[0]
        try:
            parts = shlex.split(words)
        except ValueError:
            parts = words.split()
        name = parts[0]
        assert name in commands, f"{page.relative_to(ROOT)}: 'vllm-autoscaler {name}' is no command"
        for word in parts[1:]:
            flag = word.split("=")[0].strip("[]")
            if flag.startswith("-") and flag not in ("-", "--"):
                assert flag in commands[name], f"{page.relative_to(ROOT)}: {name} has no flag {flag}"


def test_the_readme_is_for_users() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert not re.search(r"\b[0-9a-f]{7,40}\b", text), "the README quotes no commit hashes"
    assert text.splitlines()[3] == "pip install '.[sim]' && vllm-autoscaler simulate"


DECISIONS = ROOT / "docs" / "decisions"
RESULTS = ROOT / "docs" / "results"


def test_the_evidence_is_decision_records_not_a_notebook() -> None:
    """No notebook: every default has a record that states its rule and how to measure it again."""
    assert not (ROOT / "docs" / "findings.md").exists()
    for record in sorted(DECISIONS.glob("*.md")):
        if record.name == "README.md":
            continue
        text = record.read_text(encoding="utf-8")
        for part in ("**Rule.**", "**Default.**", "**Why.**", "**Rerun.**"):
            assert part in text, f"docs/decisions/{record.name} has no {part}"
        assert record.name in (DECISIONS / "README.md").read_text(encoding="utf-8"), f"{record.name} is not indexed"


def test_every_report_kept_is_cited_by_a_record() -> None:
    cited = "\n".join(p.read_text(encoding="utf-8") for p in DECISIONS.glob("*.md"))
    for report in sorted(RESULTS.glob("20*.md")):
        assert f"../results/{report.name}" in cited, f"docs/results/{report.name} is cited by no decision record"


def test_no_product_docstring_names_an_issue_or_the_notebook() -> None:
    for package in ("autoscaler", "policies", "simulations"):
        for source in sorted((ROOT / package).rglob("*.py")):
            text = source.read_text(encoding="utf-8")
            where = source.relative_to(ROOT)
            assert not re.search(r"\b[Ii]ssue #?\d+", text), f"{where} names an issue number"
            assert "findings.md" not in text, f"{where} links the notebook"
