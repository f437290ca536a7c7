"""ctxdb: context construction for an LLM coding harness, as an evidence store."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _installed_version

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

try:
    __version__ = _installed_version("ctxdb")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

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
