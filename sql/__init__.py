"""Not code: this file makes ``sql/`` the package ``ctxdb.sql`` inside the wheel, so an
installed ctxdb finds its SQL with importlib.resources (ctxdb/paths.py)."""
