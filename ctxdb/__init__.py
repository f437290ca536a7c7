"""ctxdb: context construction for an LLM coding harness, as an evidence store."""

from .config import Settings, load_settings
from .context import DecisionContext
from .migrate import StoreVersionError
from .request import (
    DecisionRequest,
    RequestError,
    UnresolvedEntity,
    UnresolvedEntityError,
    UnresolvedEntityWarning,
)
from .store import ContextStore, ReconNotFound

__all__ = [
    "ContextStore",
    "DecisionContext",
    "DecisionRequest",
    "ReconNotFound",
    "RequestError",
    "Settings",
    "StoreVersionError",
    "UnresolvedEntity",
    "UnresolvedEntityError",
    "UnresolvedEntityWarning",
    "load_settings",
]
