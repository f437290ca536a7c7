"""Component 03's recon index, our own: a tree-sitter-python index of a repository.

    stats = index_repository("path/to/repo", "recon.db")       # or a SQLAlchemy URL
    check_recon_version("recon.db")                            # ReconVersionError if stale

The tables live in schema ``recon`` (ATTACHed on SQLite, a schema on PostgreSQL), so
``SELECT … FROM recon.symbol`` reads the same on both. See `schema` for the tables,
`resolve` for how edge names are resolved, `indexer` for incremental runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> the module defining it; loaded on first use (PEP 562), so the CLI can
# register `ctxdb recon` without importing SQLAlchemy or tree-sitter
_EXPORTS = {
    "IndexLimits": "indexer",
    "IndexStats": "indexer",
    "SkippedPath": "indexer",
    "index_repository": "indexer",
    "RECON_SCHEMA_VERSION": "schema",
    "ReconVersionError": "schema",
    "check_recon_version": "schema",
    "create_recon_engine": "schema",
    "lookup_symbol": "schema",
    "open_recon": "schema",
    "recon_tables": "schema",
    "search_symbols": "schema",
}

if TYPE_CHECKING:
    from ctxdb.recon.indexer import IndexLimits, IndexStats, SkippedPath, index_repository
    from ctxdb.recon.schema import (
        RECON_SCHEMA_VERSION,
        ReconVersionError,
        check_recon_version,
        create_recon_engine,
        lookup_symbol,
        open_recon,
        recon_tables,
        search_symbols,
    )

__all__ = [
    "RECON_SCHEMA_VERSION",
    "IndexLimits",
    "IndexStats",
    "ReconVersionError",
    "check_recon_version",
    "create_recon_engine",
    "index_repository",
    "lookup_symbol",
    "open_recon",
    "recon_tables",
    "search_symbols",
    "SkippedPath",
]  # = the keys of _EXPORTS (tests/test_layout.py)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ctxdb.recon' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ctxdb.recon.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
