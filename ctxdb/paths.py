"""Where the package's non-Python parts live.

``sql/`` and ``migrations/`` are top-level directories of the repository (analysts read
the SQL as files; alembic reads the migrations by path). A checkout's copy next to the
package wins, so an editable install and a worktree read their own; an installed wheel
carries both inside the package (``ctxdb.sql``, ``ctxdb.migrations``, pyproject.toml)
and they are found with importlib.resources.
"""

import contextlib
import os
import tempfile
from importlib import resources
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parent
# a file each of the two directories holds, wherever they are
_MARKER = "__init__.py"


def _resource_dir(name: str) -> Path:
    """The directory ``name`` of a checkout beside the package, else the one shipped
    inside the installed package."""
    checkout = PROJECT_ROOT / name
    # a checkout (its pyproject.toml beside the package), not site-packages, where another
    # distribution's top-level `sql` or `migrations` could sit
    if (PROJECT_ROOT / "pyproject.toml").is_file() and (checkout / _MARKER).is_file():
        return checkout
    try:
        shipped = resources.files(f"ctxdb.{name}")
    except ModuleNotFoundError:
        return checkout  # neither: require_dir says so when it is used
    return Path(str(shipped))


SQL_DIR = _resource_dir("sql")
VIEWS_DIR = SQL_DIR / "views"
CHECKS_DIR = SQL_DIR / "checks"
MIGRATIONS_DIR = _resource_dir("migrations")


def extra_install_hint(extra: str) -> str:
    """How to install one of ctxdb's optional extras (pyproject.toml): ctxdb comes from a
    checkout or its wheel, not from a package index, so ``pip install ctxdb[…]`` would
    fetch some other project's ctxdb, or nothing."""
    return (f"install ctxdb's {extra} extra: pip install -e '.[{extra}]' in a checkout of "
            f"ctxdb, or its wheel's path followed by [{extra}]")


def require_dir(path: Path) -> Path:
    if not path.is_dir():
        raise FileNotFoundError(
            f"ctxdb expected the directory {path}, which ships inside the package: "
            "reinstall ctxdb (its wheel, or pip install -e . in a checkout)"
        )
    return path


def write_whole(output: str | os.PathLike[str], text: str) -> None:
    """``text`` as the file ``output``, whole or not at all: written to a temporary file
    beside it and renamed over it, with the mode the file had (or a new file's, as
    ``open`` would make it), so a stop half way leaves the file as it was."""
    output = os.fspath(output)
    directory = os.path.dirname(os.path.abspath(output))
    if os.path.exists(output):
        mode = os.stat(output).st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # as open() would make it, not mkstemp's 0600
    handle, temporary = tempfile.mkstemp(prefix=".ctxdb-", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, output)
    except BaseException:  # (a stop after the rename finds no temporary file)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
