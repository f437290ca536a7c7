"""Component 03's recon index, our own: a tree-sitter-python index of a repository.

    stats = index_repository("path/to/repo", "recon.db")       # or a SQLAlchemy URL
    check_recon_version("recon.db")                            # ReconVersionError if stale

The tables live in schema ``recon`` (ATTACHed on SQLite, a schema on PostgreSQL), so
``SELECT … FROM recon.symbol`` reads the same on both. See `schema` for the tables,
`resolve` for how edge names are resolved, `indexer` for incremental runs.
"""

from ctxdb.recon.indexer import IndexStats, index_repository
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
    "IndexStats",
    "ReconVersionError",
    "check_recon_version",
    "create_recon_engine",
    "index_repository",
    "lookup_symbol",
    "open_recon",
    "recon_tables",
    "search_symbols",
]
