"""What a process keeps across decisions, and how to drop it.

A harness constructs many decisions over one repository in one process, so ctxdb keeps,
per process: what it read of each recon snapshot and source texts by content hash
(recon/reader.py), text hashes, identifier-term sets, item term sets, parsed entity
keys, the 8 KB cuts of large entities, and the token counts it has seen in each store
(tokens.py); and what the recon indexer keeps for its next run (recon/kept.py). None of
it can go stale (see each module). This drops all of it: the state of a fresh process,
for benchmarks and tests.
"""

from __future__ import annotations

from . import entities, terms, tokens
from .pipeline import assemble, gate_inputs
from .recon import kept, reader


def forget_process_caches() -> None:
    reader.forget_recon_reads()
    kept.forget_indexer_state()
    tokens.forget_counts_in_process()
    tokens.forget_hashes_in_process()
    terms.forget_terms()
    gate_inputs.forget_item_terms()
    for memo in (entities.parse_entity_key, assemble._cut_code_around):
        memo.cache_clear()
