"""The documentation: the README and its docs/ pages, the generated CLI reference, and
no citation of a file the repository does not hold."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxdb import docs_cli
from ctxdb.cli import build_parser

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = REPO_ROOT / "docs"
README = REPO_ROOT / "README.md"
README_MAX_LINES = 250  # issue 21: a README a newcomer reads, the rest in docs/
# a markdown link to a file of the repository: ](path) or ](path#anchor), not a URL
RELATIVE_LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)(?:#[^)]*)?\)")
# the directories whose files may cite a document by name
CITING_DIRECTORIES = ("ctxdb", "tests", "bench", "sql", "migrations", "examples", "tools",
                      "docs")
CITING_FILES = ("README.md", "CHANGELOG.md", "pyproject.toml", "Makefile")
COMMITTED_CLI_PAGE = DOCS / "cli.md"
EXAMPLE_TIMEOUT_S = 120  # indexing the fixture repository and one decision: seconds
# a markdown file's name or path as code and pages cite it: README.md, docs/schema.md
CITED_MARKDOWN = re.compile(r"(?<![\w./-])([\w./-]*\w\.md)\b")


def _citing_files():
    for directory in CITING_DIRECTORIES:
        for path in (REPO_ROOT / directory).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".md", ".sql", ".toml", ".txt"}:
                yield path
    for name in CITING_FILES:
        yield REPO_ROOT / name


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move a section to docs/"


def test_the_readme_links_every_docs_page():
    readme = README.read_text(encoding="utf-8")
    linked = {Path(target).name for target in RELATIVE_LINK.findall(readme)
              if target.startswith("docs/")}
    pages = {page.name for page in DOCS.glob("*.md")}
    assert pages - linked == set(), f"README.md does not link {sorted(pages - linked)}"


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_relative_link_of_a_page_points_at_a_file(page):
    text = page.read_text(encoding="utf-8")
    broken = [target for target in RELATIVE_LINK.findall(text)
              if not (page.parent / target).exists()]
    assert not broken, f"{page.relative_to(REPO_ROOT)} links missing files: {broken}"


def test_every_markdown_file_a_source_or_page_cites_is_there():
    """A name ending in .md, in code, SQL or a page, is a file of the repository: at the
    root, beside the citing file, or in docs/ (the design note is docs/design.md)."""
    assert (DOCS / "design.md").exists()
    missing = []
    for path in _citing_files():
        for name in set(CITED_MARKDOWN.findall(path.read_text(encoding="utf-8"))):
            places = (REPO_ROOT / name, path.parent / name, DOCS / name)
            if not any(place.exists() for place in places):
                missing.append(f"{path.relative_to(REPO_ROOT)}: {name}")
    assert not missing, f"these cite markdown files the repository does not hold: {missing}"


def test_the_committed_cli_reference_is_what_the_generator_writes():
    committed = COMMITTED_CLI_PAGE.read_text(encoding="utf-8")
    if f"with Python {docs_cli.python_version()}'s argparse" not in committed:
        pytest.skip("docs/cli.md was laid out by another Python's argparse")
    assert committed == docs_cli.cli_markdown(), (
        f"docs/cli.md is stale: run `{docs_cli.GENERATOR}`")


def test_the_cli_reference_has_every_command_and_subcommand():
    page = docs_cli.cli_markdown()
    titles = re.findall(r"^## `(ctxdb[^`]*)`$", page, re.MULTILINE)
    expected = ["ctxdb"]

    def walk(parser, path):
        for name, sub in docs_cli._subcommands(parser).items():
            expected.append(" ".join(("ctxdb", *path, name)))
            walk(sub, (*path, name))

    walk(build_parser(), ())
    assert titles == expected
    for command in ("ctxdb recon index", "ctxdb db schema-docs", "ctxdb ab run",
                    "ctxdb tokens count", "ctxdb replay"):
        assert command in titles, command


def test_the_cli_reference_is_the_same_at_any_terminal_width(monkeypatch):
    wide = docs_cli.cli_markdown()
    monkeypatch.setenv("COLUMNS", "40")
    assert docs_cli.cli_markdown() == wide
    assert "usage: ctxdb construct" in wide
    assert str(Path.home()) not in wide


def test_the_cli_reference_generator_writes_the_page(tmp_path):
    output = tmp_path / "cli.md"
    assert docs_cli.main(["-o", str(output)]) == 0
    assert output.read_text(encoding="utf-8") == docs_cli.cli_markdown()


def test_the_readme_library_example_runs_from_a_checkout(tmp_path):
    readme = README.read_text(encoding="utf-8")
    example = re.search(r"^## Library\n.*?^```python\n(.*?)^```", readme,
                        re.DOTALL | re.MULTILINE)
    assert example, "README.md's Library section has no python example"
    (tmp_path / "fixtures").symlink_to(REPO_ROOT / "fixtures")
    # the example's last lines leave values unused; print the ones a reader checks
    script = example.group(1) + (
        "\nprint(context.token_count <= context.ceiling, store_ok)\n")
    script = script.replace("store.verify()", "store_ok = store.verify() == {}")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, text=True,
                            capture_output=True, timeout=EXAMPLE_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True True"
