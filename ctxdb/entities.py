"""Entity keys (docs/request.md), the one place that parses them.

``path::Qual.name`` for symbols, ``path:START-END`` for line spans, ``path`` for files.
The gate, dedup, gold facts and the recon index all key on them; what counts as a test
file is decided here too, for the indexer and the renderer alike.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from dataclasses import dataclass

SYMBOL_SEPARATOR = "::"
_SPAN_KEY = re.compile(r"^(?P<path>[^:]+):(?P<start>\d+)-(?P<end>\d+)$")
TEST_DIRECTORIES = frozenset({"tests", "test"})


@dataclass(frozen=True)
class EntityRef:
    key: str
    path: str
    qualified_name: str | None = None
    start_line: int | None = None
    end_line: int | None = None


@functools.lru_cache(maxsize=1 << 14)  # a harness names the same entities decision after decision
def parse_entity_key(key: str) -> EntityRef:
    """Split an entity key into its parts; raise ValueError naming the key if malformed."""
    if SYMBOL_SEPARATOR in key:
        path, _, qualified_name = key.partition(SYMBOL_SEPARATOR)
        if not path or not qualified_name or SYMBOL_SEPARATOR in qualified_name:
            raise ValueError(f"entity {key!r}: expected path::Qual.name")
        return EntityRef(key, path, qualified_name=qualified_name)
    span = _SPAN_KEY.match(key)
    if span:
        start, end = int(span["start"]), int(span["end"])
        if start < 1 or end < start:
            raise ValueError(f"entity {key!r}: expected path:START-END with 1 <= START <= END")
        return EntityRef(key, span["path"], start_line=start, end_line=end)
    if ":" in key:
        raise ValueError(f"entity {key!r}: expected path::Qual.name, path:START-END or path")
    return EntityRef(key, key)


def path_of_key(key: str) -> str:
    """The file an entity key names (no validation: for keys already parsed once)."""
    return key.split(SYMBOL_SEPARATOR, 1)[0].split(":", 1)[0]


def is_absolute_key(key: str) -> bool:
    """An entity key whose path is absolute (a harness holding paths as it opened them).
    The key's path is its head, so this is posixpath.isabs of it without cutting it out
    (asked of every key a request names, each decision)."""
    return key.startswith("/")


def relative_to_root(key: str, root: str) -> str | None:
    """``key`` with its absolute path made relative to ``root`` (the indexed directory's
    real path), or None when the path is outside it. Tried as written, then with
    symlinks resolved (the index walks the real tree)."""
    path = path_of_key(key)
    rest = key[len(path):]
    inside = root.rstrip("/") + "/"
    for candidate in (posixpath.normpath(path), os.path.realpath(path)):
        if candidate.startswith(inside):
            return candidate[len(inside):] + rest
    return None


def is_module_key(key: str | None) -> bool:
    """A whole file (``path``), not a symbol of it or a span of its lines."""
    if not key:
        return False
    return SYMBOL_SEPARATOR not in key and _SPAN_KEY.match(key) is None


def is_symbol_key(key: str | None) -> bool:
    return key is not None and SYMBOL_SEPARATOR in key


def entity_key_of_test_id(test_id: str) -> str:
    """``tests/test_a.py::TestX::test_y[param]`` → ``tests/test_a.py::TestX.test_y``."""
    path, sep, rest = test_id.partition(SYMBOL_SEPARATOR)
    if not sep:
        return path
    rest = rest.split("[", 1)[0]
    return f"{path}{SYMBOL_SEPARATOR}{rest.replace(SYMBOL_SEPARATOR, '.')}"


def is_test_path(path: str) -> bool:
    """A file pytest would collect or configure tests from: under a ``tests``/``test``
    directory, ``test_*.py``, ``*_test.py`` or ``conftest.py``."""
    parts = path.split("/")
    name = parts[-1]
    return (
        any(part in TEST_DIRECTORIES for part in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def is_test_entity(entity_key: str | None) -> bool:
    return entity_key is not None and entity_key != "" and is_test_path(path_of_key(entity_key))
