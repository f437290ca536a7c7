"""A walk of a tree with nothing kept, for comparing a kept walk with (recon tests)."""

from __future__ import annotations

from pathlib import Path

from ctxdb.recon import kept, walk, watch


def walk_afresh(root: Path) -> walk.Walk:
    """A walk with nothing kept (no listing, no watch), leaving what is kept as it was."""
    saved = dict(kept._WALKS)
    kept._WALKS.clear()
    try:
        return walk.walk_repository(root)
    finally:
        for fresh in kept._WALKS.values():
            fresh.close()
        kept._WALKS.clear()
        kept._WALKS.update(saved)


def have_watches() -> bool:
    """Whether inotify watches can be had here (the probe's are let go at once)."""
    probe = watch.open_watch()
    if probe is None:
        return False
    probe.close()
    return True
