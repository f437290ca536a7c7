"""Component 04 for a harness without its own: retrieval and localization over recon.

    from ctxdb.retrieval import retrieve
    with engine.connect() as connection:          # recon tables visible as recon.*
        found = retrieve(connection, issue_text, failing_tests=["test_x"], traceback=out)
    found.symbols   # Candidate(entity_key, score, signals={"body": 3, "tests": 1}), best first
    found.files     # FileCandidate(path, score), best first

Deterministic and model-free: `signals` finds candidates five ways, `retriever` fuses
them (weighted reciprocal-rank fusion) and ranks files; `evaluate` measures it on
SWE-bench-format instances (``ctxdb retrieve --eval``).
"""

from .retriever import (
    DEFAULT_LIMIT,
    SIGNALS,
    Candidate,
    FileCandidate,
    Retrieval,
    retrieve,
)

__all__ = ["DEFAULT_LIMIT", "SIGNALS", "Candidate", "FileCandidate", "Retrieval", "retrieve"]
