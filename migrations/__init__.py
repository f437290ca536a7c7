"""Not code: this file makes ``migrations/`` the package ``ctxdb.migrations`` inside the
wheel, so an installed ctxdb hands alembic its scripts (ctxdb/paths.py)."""
