"""ctxdb: context construction for an LLM coding harness, as an evidence store."""

from .config import Settings, load_settings
from .migrate import StoreVersionError
from .store import ContextStore, ReconNotFound

__all__ = ["ContextStore", "Settings", "StoreVersionError", "ReconNotFound", "load_settings"]
