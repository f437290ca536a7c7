"""ctxdb: context construction for an LLM coding harness, as an evidence store.

The public names load on first use (PEP 562): ``import ctxdb`` costs no SQLAlchemy,
alembic or tokenizer import, so a harness and ``ctxdb --help`` start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> the module that defines it
_EXPORTS = {
    "ContextStore": "store",
    "RequestBuilder": "builder",
    "ReconNotFound": "store",
    "DecisionContext": "context",
    "DecisionRequest": "request",
    "PlanNode": "request",
    "EvidenceInput": "request",
    "ImpactEdgeInput": "request",
    "InsertionPoint": "request",
    "LiveEvent": "request",
    "LiveState": "request",
    "RequestError": "request",
    "RequestEncodingError": "request_limits",
    "UnresolvedEntity": "request",
    "UnresolvedEntityError": "request",
    "UnresolvedEntityWarning": "request",
    "Settings": "config",
    "load_settings": "config",
    "StoreVersionError": "migrate",
    "NotAStoreError": "db",
    "StoreBusy": "transactions",
    "StoreUnreachable": "db",
}
__all__ = [
    "ContextStore",
    "DecisionContext",
    "DecisionRequest",
    "EvidenceInput",
    "ImpactEdgeInput",
    "InsertionPoint",
    "LiveEvent",
    "LiveState",
    "NotAStoreError",
    "PlanNode",
    "ReconNotFound",
    "RequestBuilder",
    "RequestEncodingError",
    "RequestError",
    "Settings",
    "StoreBusy",
    "StoreUnreachable",
    "StoreVersionError",
    "UnresolvedEntity",
    "UnresolvedEntityError",
    "UnresolvedEntityWarning",
    "load_settings",
]  # = the keys of _EXPORTS (tests/test_layout.py)

if TYPE_CHECKING:  # what a type checker and an IDE see
    from .builder import RequestBuilder
    from .config import Settings, load_settings
    from .context import DecisionContext
    from .db import NotAStoreError, StoreUnreachable
    from .migrate import StoreVersionError
    from .request import (
        DecisionRequest,
        EvidenceInput,
        ImpactEdgeInput,
        InsertionPoint,
        LiveEvent,
        LiveState,
        PlanNode,
        RequestError,
        UnresolvedEntity,
        UnresolvedEntityError,
        UnresolvedEntityWarning,
    )
    from .request_limits import RequestEncodingError
    from .store import ContextStore, ReconNotFound
    from .transactions import StoreBusy

    __version__: str


def __getattr__(name: str) -> object:
    if name == "__version__":
        value = _version()
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'ctxdb' has no attribute {name!r}")
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, "__version__"])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxdb")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"
