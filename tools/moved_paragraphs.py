"""Check that a move of the README into docs/ lost nothing.

``python tools/moved_paragraphs.py REV`` reads README.md as it was at the git revision
REV and prints every paragraph of it (text between blank lines, whitespace folded)
that is in neither the README.md of the working tree nor any docs/*.md page, each with
the new paragraph most like it — an edit the move needed (a link, a relative date, a
heading's level) shows as a close match. Exit 1 when a paragraph has no close match,
0 when every paragraph was kept or edited somewhere.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WHITESPACE = re.compile(r"\s+")
# a paragraph this alike (difflib's ratio) to a new one was edited, not lost
EDITED_MIN_RATIO = 0.8


# a link from the README into docs/ reads ](docs/NAME); from a page beside it, ](NAME)
README_LINK_INTO_DOCS = "](docs/"
PAGE_LINK_IN_DOCS = "]("


def folded(text: str) -> str:
    """Whitespace folded to single spaces, links into docs/ as a page there writes them."""
    return WHITESPACE.sub(" ", text).replace(README_LINK_INTO_DOCS, PAGE_LINK_IN_DOCS)


def paragraphs(text: str) -> list[str]:
    """The text's paragraphs, each folded."""
    blocks = (folded(block).strip() for block in re.split(r"\n\s*\n", text))
    return [block for block in blocks if block]


def missing_paragraphs(old_readme: str, new_texts: list[str]) -> list[str]:
    """The old README's paragraphs found in none of the new texts."""
    haystack = "\n".join(folded(text) for text in new_texts)
    return [paragraph for paragraph in paragraphs(old_readme) if paragraph not in haystack]


def closest(paragraph: str, new_paragraphs: list[str]) -> tuple[float, str]:
    """The new paragraph most like this one, and how alike (0 to 1)."""
    best = (0.0, "")
    for candidate in new_paragraphs:
        matcher = difflib.SequenceMatcher(None, paragraph, candidate, autojunk=False)
        if matcher.real_quick_ratio() > best[0] and matcher.quick_ratio() > best[0]:
            best = max(best, (matcher.ratio(), candidate))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the git revision whose README.md was split")
    args = parser.parse_args(argv)
    old = subprocess.run(["git", "show", f"{args.rev}:README.md"], cwd=REPO_ROOT, check=True,
                         capture_output=True, text=True).stdout
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    texts = [page.read_text(encoding="utf-8") for page in pages]
    missing = missing_paragraphs(old, texts)
    new_paragraphs = [paragraph for text in texts for paragraph in paragraphs(text)]
    lost = 0
    for paragraph in missing:
        ratio, match = closest(paragraph, new_paragraphs)
        edited = ratio >= EDITED_MIN_RATIO
        lost += not edited
        print(f"{'edited' if edited else 'LOST'} ({ratio:.2f}): {paragraph[:160]}")
        if edited:
            print(f"    now: {match[:160]}")
    print(f"{len(paragraphs(old))} paragraphs: {len(missing)} not verbatim, {lost} lost")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
