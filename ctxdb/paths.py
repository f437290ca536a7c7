"""Where the repository's non-Python parts live.

``sql/`` and ``migrations/`` are top-level directories of the project (they are
read by analysts and by alembic as files), so the package finds them next to
itself; the Makefile installs the package in editable mode.
"""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
SQL_DIR = PROJECT_ROOT / "sql"
VIEWS_DIR = SQL_DIR / "views"
CHECKS_DIR = SQL_DIR / "checks"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"


def require_dir(path: Path) -> Path:
    if not path.is_dir():
        raise FileNotFoundError(
            f"ctxdb expected the directory {path} next to its package; "
            "install the project with `pip install -e .` from a checkout (see README)"
        )
    return path
