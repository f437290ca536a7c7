"""The store's tables, as SQLAlchemy Core metadata.

The schema itself is owned by the alembic migrations in ``migrations/``; these
definitions mirror head so Python code can build statements with bound
parameters, and ``tests/test_migrations.py`` checks that the two agree.
Names are chosen to read well in a ``sqlite3`` shell: one noun per table, the
decision's pool in ``evidence_item``, every stage action in ``item_event``.
"""

from __future__ import annotations

import operator
import sqlite3
from datetime import UTC, datetime, timedelta
from itertools import chain

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    insert,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import false, true

from .db import insert_statement
from .spec import EVIDENCE_SOURCES, STORED_EVIDENCE_KINDS

metadata = MetaData()


def utc_timestamp(seconds_from_now: float = 0, *, now: datetime | None = None) -> str:
    """A time as the replay tables hold it (UTC, ISO 8601 to the second): one format, so
    two compare as text on both backends. ``now`` is the moment counted from."""
    moment = (now or datetime.now(UTC)) + timedelta(seconds=seconds_from_now)
    return moment.isoformat(timespec="seconds")


def _any_of(column: str, values) -> str:
    """A CHECK rule `column = 'a' OR column = 'b' …` over a closed enum from spec.py."""
    return " OR ".join(f"{column} = '{value}'" for value in values)


run = Table(
    "run",
    metadata,
    Column("run_id", String(200), primary_key=True),
    Column("arm", String(20), nullable=False, server_default="ctx08"),
    Column("variant", String(100), nullable=False, server_default="default"),
    Column("created_at", String(32), nullable=False),
    Column("settings_json", Text, nullable=False, server_default="{}"),
    Column("note", Text),
    CheckConstraint("arm IN ('ctx08', 'current')", name="ck_run_arm"),
)
# run.note of the run a replay's windows go under: what the run id is for (the replay
# refuses any other run's id; a check in sql/checks/ finds a replay's leftovers by it)
REPLAY_RUN_NOTE = "replay of recorded agent runs"
# decision.instance_id of a run's earlier replay while a replay of it again runs: this,
# then that replay's replay_in_progress.lease_id (put back if it fails, else removed)
REPLAY_HELD_INSTANCE_PREFIX = "held aside by replay "

decision = Table(
    "decision",
    metadata,
    Column("decision_id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(200), ForeignKey("run.run_id"), nullable=False),
    Column("instance_id", String(200), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("decision_type", String(20), nullable=False),
    Column("task_text", Text, nullable=False),
    Column("decision_question", Text),
    Column("request_json", Text, nullable=False),  # the request as given: nothing is lost
    Column("request_sha256", String(64), nullable=False),
    Column("tokenizer", String(40), nullable=False),
    Column("token_ceiling", Integer, nullable=False),
    Column("token_count", Integer),
    Column("flags", Text, nullable=False, server_default=""),
    Column("created_at", String(32), nullable=False),
    CheckConstraint(
        "decision_type IN ('localize', 'edit', 'repair', 'other')", name="ck_decision_type"
    ),
)

Index("ix_decision_run_instance_seq", decision.c.run_id, decision.c.instance_id, decision.c.seq)

obligation = Table(
    "obligation",
    metadata,
    Column("decision_id", Integer, ForeignKey("decision.decision_id"), nullable=False),
    Column("obligation_no", Integer, nullable=False),
    Column("source", String(10), nullable=False),  # '07' plan node, '06' downstream
    Column("node_id", String(200)),
    Column("obligation_text", Text, nullable=False),
    Column("target_entity", Text),
    Column("preconditions_json", Text, nullable=False, server_default="[]"),
    Column("dependencies_json", Text, nullable=False, server_default="[]"),  # 0007
    Column("required_validation_json", Text, nullable=False, server_default="[]"),
    Column("acceptance_criteria_json", Text, nullable=False, server_default="[]"),
    Column("insertion_path", Text),
    Column("insertion_line", Integer),
    Column("insertion_end_line", Integer),  # the edit site's last line (0007)
    PrimaryKeyConstraint("decision_id", "obligation_no"),
)

impact_edge = Table(
    "impact_edge",
    metadata,
    Column("decision_id", Integer, ForeignKey("decision.decision_id"), nullable=False),
    Column("edge_no", Integer, nullable=False),
    Column("head_entity", Text, nullable=False),
    Column("tail_entity", Text, nullable=False),
    Column("edge_kind", String(30), nullable=False),
    Column("depth", Integer, nullable=False),
    Column("origin", String(10), nullable=False),  # '06' given by the harness, 'recon' derived
    PrimaryKeyConstraint("decision_id", "edge_no"),
    CheckConstraint(
        "edge_kind IN ('CalledBy', 'ConfigConsumer', 'SchemaConsumer', 'PreserveObligation')",
        name="ck_impact_edge_kind",
    ),
    CheckConstraint("depth >= 1", name="ck_impact_edge_depth"),
)
# the gate's lookup: direct impact edges into one pool item's entity
Index("ix_impact_edge_tail", impact_edge.c.decision_id, impact_edge.c.tail_entity,
      impact_edge.c.depth, impact_edge.c.edge_no)

evidence_text = Table(
    "evidence_text",
    metadata,
    Column("content_sha256", String(64), primary_key=True),
    Column("content", Text, nullable=False),
    comment=("Each distinct text once: evidence_item and window_item rows (0011) refer"
             " to it by hash."),
)

evidence_item = Table(
    "evidence_item",
    metadata,
    Column("decision_id", Integer, ForeignKey("decision.decision_id"), nullable=False),
    Column("item_id", String(16), nullable=False),  # 'E1', 'E2', … stable within the decision
    Column("item_no", Integer, nullable=False),  # the numeric part, for ordering
    Column("source", String(10), nullable=False),
    Column("kind", String(30), nullable=False),
    Column("entity_key", Text),
    # the text (capped at CONTENT_MAX_BYTES, marked if cut) is evidence_text's row
    Column("content_sha256", String(64), ForeignKey("evidence_text.content_sha256",
                                                    name="fk_evidence_item_content"),
           nullable=False),
    Column("provenance", String(200), nullable=False),
    Column("score", Float),
    Column("arrival_no", Integer),  # live state: order of arrival
    Column("path", Text),
    Column("start_line", Integer),
    Column("end_line", Integer),
    Column("signature", Text),
    Column("in_pool", Boolean, nullable=False, server_default=true()),  # false past the 256 cap
    Column("fact_key", Text),  # §3.5 fact identity (dedup.fact_key)
    # the full text when the content was cut at the cap
    Column("original_sha256", String(64), ForeignKey("evidence_text.content_sha256",
                                                     name="fk_evidence_item_original")),
    PrimaryKeyConstraint("decision_id", "item_id"),
    # with the primary key: item numbers unique per decision, without another index
    CheckConstraint("item_id = 'E' || item_no", name="ck_evidence_item_id"),
    # OR chains, not IN lists: SQLite builds a temporary index per row for an IN list in a
    # CHECK (migration 0005)
    CheckConstraint(_any_of("source", EVIDENCE_SOURCES), name="ck_evidence_source"),
    CheckConstraint(_any_of("kind", STORED_EVIDENCE_KINDS), name="ck_evidence_kind"),
)
Index("ix_evidence_item_fact", evidence_item.c.decision_id, evidence_item.c.fact_key)

decision_link = Table(
    "decision_link",
    metadata,
    Column("decision_id", Integer, ForeignKey("decision.decision_id"), nullable=False),
    Column("link_no", Integer, nullable=False),
    Column("link_kind", String(30), nullable=False),
    Column("entity_key", Text, nullable=False),
    Column("path", Text),
    Column("start_line", Integer),
    Column("end_line", Integer),
    Column("detail", Text),
    PrimaryKeyConstraint("decision_id", "link_no"),
)
Index("ix_decision_link_entity", decision_link.c.decision_id, decision_link.c.entity_key)

item_nearness = Table(
    "item_nearness",
    metadata,
    Column("decision_id", Integer, nullable=False),
    Column("item_id", String(16), nullable=False),
    Column("shared_terms", Text, nullable=False, server_default=""),
    Column("recon_hops", Integer),
    Column("nearest_link_no", Integer),
    # gate_inputs.near_score (0007): the gate leaves an item residual iff it reaches
    # NEAR_MIN_SCORE; below it the item is rejected
    Column("near_score", Float, nullable=False, server_default="0"),
    PrimaryKeyConstraint("decision_id", "item_id"),
    ForeignKeyConstraint(
        ["decision_id", "item_id"], ["evidence_item.decision_id", "evidence_item.item_id"]
    ),
)

# The preview's TEMP tables on SQLite (store.py): what v_gate_rule reads of a decision,
# written before the write lock and read by a TEMP copy of the view. Named apart from the
# store's tables, so the same connection then writes the store by its plain names and
# copies these rows in (persist.write_inputs) instead of binding each again. Their own
# MetaData: they are no part of the store's schema. Each has its table's columns (the
# decision row only what the view reads of it), its primary key and the indexes the
# gate looks up by (the pool's fact-key index is not one), no CHECK constraints or
# foreign keys (the write checks every row it copies, under the lock).
PREVIEW_PREFIX = "preview_"
GATE_VIEW = "v_gate_rule"
PREVIEW_GATE_VIEW = PREVIEW_PREFIX + GATE_VIEW  # the view over the preview's tables
preview_metadata = MetaData()
PREVIEW_DECISION_COLUMNS = ("decision_id", "decision_type")


def _preview_copy(table: Table, columns: tuple[str, ...] | None = None, *,
                  indexed: bool = True) -> Table:
    copy = Table(PREVIEW_PREFIX + table.name, preview_metadata,
                 *(Column(c.name, c.type, nullable=c.nullable, primary_key=c.primary_key)
                   for c in table.columns if columns is None or c.name in columns),
                 prefixes=["TEMPORARY"])
    for index in table.indexes if indexed else ():
        Index(PREVIEW_PREFIX + str(index.name), *(copy.c[c.name] for c in index.columns))
    return copy


preview_decision = _preview_copy(decision, PREVIEW_DECISION_COLUMNS, indexed=False)
preview_evidence_item = _preview_copy(evidence_item, indexed=False)
preview_decision_link = _preview_copy(decision_link)
preview_impact_edge = _preview_copy(impact_edge)
preview_item_nearness = _preview_copy(item_nearness)
# store table -> its preview copy, in the order the write copies them (parents first)
PREVIEW_TABLES = {decision: preview_decision, evidence_item: preview_evidence_item,
                  decision_link: preview_decision_link, impact_edge: preview_impact_edge,
                  item_nearness: preview_item_nearness}

source_priority = Table(
    "source_priority",
    metadata,
    Column("source", String(10), primary_key=True),
    Column("priority", Integer, nullable=False),
    Column("why", Text, nullable=False),
)

gate_link_policy = Table(
    "gate_link_policy",
    metadata,
    Column("decision_type", String(20), nullable=False),
    Column("link_kind", String(30), nullable=False),
    Column("meaning", Text, nullable=False),
    PrimaryKeyConstraint("decision_type", "link_kind"),
)

representation_policy = Table(
    "representation_policy",
    metadata,
    Column("policy_set", String(60), nullable=False),  # 'spec' = §3.3; ablations add sets
    Column("role", String(40), nullable=False),
    Column("evidence_class", Text, nullable=False),  # the table's "Evidence kind" column
    Column("rendering", String(20), nullable=False),
    Column("rule", Text, nullable=False),  # the table's wording, for the reader
    PrimaryKeyConstraint("policy_set", "role"),
    CheckConstraint(
        "rendering IN ('verbatim', 'signature', 'digest', 'truncated', 'omitted')",
        name="ck_policy_rendering",
    ),
)

item_event = Table(
    "item_event",
    metadata,
    Column("event_id", Integer, primary_key=True, autoincrement=True),
    Column("decision_id", Integer, nullable=False),
    Column("item_id", String(16), nullable=False),
    Column("event_no", Integer, nullable=False),  # order within the decision
    Column("stage", String(20), nullable=False),
    Column("action", String(30), nullable=False),
    Column("driver", Text),  # what admitted it, or why it was dropped
    Column("tokens_before", Integer),
    Column("tokens_after", Integer),
    Column("is_final", Boolean, nullable=False, server_default=false()),
    Column("detail", Text),
    ForeignKeyConstraint(
        ["decision_id", "item_id"], ["evidence_item.decision_id", "evidence_item.item_id"]
    ),
)
Index("ix_item_event_item", item_event.c.decision_id, item_event.c.item_id)

window_item = Table(
    "window_item",
    metadata,
    Column("decision_id", Integer, ForeignKey("decision.decision_id"), nullable=False),
    Column("position", Integer, nullable=False),
    Column("item_id", String(16), nullable=False),
    Column("role", String(40), nullable=False),
    Column("rendering", String(20), nullable=False),
    Column("tier", String(20), nullable=False),
    Column("block", String(10), nullable=False),  # front | middle | back
    Column("edge_critical", Boolean, nullable=False),
    Column("token_count", Integer, nullable=False),
    # the file lines whose text the item shows (0007): NULL when it shows no body
    Column("shown_start_line", Integer),
    Column("shown_end_line", Integer),
    # the text it adds to the window (evidence_text, 0011: a loop's windows repeat theirs)
    Column("rendered_sha256", String(64), ForeignKey("evidence_text.content_sha256",
                                                     name="fk_window_item_rendered"),
           nullable=False),
    PrimaryKeyConstraint("decision_id", "position"),
    ForeignKeyConstraint(
        ["decision_id", "item_id"], ["evidence_item.decision_id", "evidence_item.item_id"]
    ),
    CheckConstraint("tier IN ('stable_core', 'working_set', 'transient')", name="ck_window_tier"),
    CheckConstraint("block IN ('front', 'middle', 'back')", name="ck_window_block"),
)
# a pool item's place in its window (0012): the key finds an item by position only
Index("ix_window_item_item", window_item.c.decision_id, window_item.c.item_id)

budget_log = Table(
    "budget_log",
    metadata,
    Column("decision_id", Integer, ForeignKey("decision.decision_id"), nullable=False),
    Column("step_no", Integer, nullable=False),
    Column("ladder_step", String(40), nullable=False),
    Column("item_id", String(16)),
    Column("tokens_before", Integer, nullable=False),
    Column("tokens_after", Integer, nullable=False),
    Column("detail", Text),
    PrimaryKeyConstraint("decision_id", "step_no"),
)

rank_call = Table(
    "rank_call",
    metadata,
    Column("rank_call_id", Integer, primary_key=True, autoincrement=True),
    Column("decision_id", Integer, ForeignKey("decision.decision_id"), nullable=False),
    Column("model", String(100), nullable=False),
    Column("base_url", Text, nullable=False),
    Column("request_json", Text, nullable=False),
    Column("response_text", Text),
    Column("parse_status", String(40), nullable=False),  # ok | the failure class
    Column("error", Text),
    Column("latency_ms", Float),
    Column("prompt_tokens", Integer),
    Column("completion_tokens", Integer),
    Column("created_at", String(32), nullable=False),
    UniqueConstraint("decision_id", name="uq_rank_call_one_per_decision"),  # §4: ONE call
)

rank_score = Table(
    "rank_score",
    metadata,
    Column("rank_call_id", Integer, ForeignKey("rank_call.rank_call_id"), nullable=False),
    Column("item_id", String(16), nullable=False),
    Column("relevance_score", Float),
    Column("verdict", String(10), nullable=False),  # admit | reject
    PrimaryKeyConstraint("rank_call_id", "item_id"),
)

token_count_cache = Table(
    "token_count_cache",
    metadata,
    Column("tokenizer", String(40), nullable=False),
    Column("content_sha256", String(64), nullable=False),
    Column("token_count", Integer, nullable=False),
    PrimaryKeyConstraint("tokenizer", "content_sha256"),
)

outcome = Table(
    "outcome",
    metadata,
    Column("run_id", String(200), ForeignKey("run.run_id"), nullable=False),
    Column("instance_id", String(200), nullable=False),
    Column("solved", Boolean, nullable=False),
    Column("cost_usd", Float),
    Column("model_tokens_in", Integer),
    Column("model_tokens_out", Integer),
    Column("recorded_at", String(32), nullable=False),
    PrimaryKeyConstraint("run_id", "instance_id"),
)

gold_fact = Table(
    "gold_fact",
    metadata,
    Column("instance_id", String(200), nullable=False),
    Column("fact_no", Integer, nullable=False),
    Column("fact_kind", String(30), nullable=False),  # edited_entity | test_function | fail_to_pass
    Column("entity_key", Text, nullable=False),
    Column("detail", Text),
    Column("path", Text),  # where the fact sits in the base commit (0004)
    Column("start_line", Integer),
    Column("end_line", Integer),
    # the lines the gold patch changes inside the fact (0007)
    Column("changed_start_line", Integer),
    Column("changed_end_line", Integer),
    Column("head_text", Text),  # a def/class fact's def/class line (0007)
    PrimaryKeyConstraint("instance_id", "fact_no"),
)

# Replays of recorded agent runs (0008, issue 20): ctxdb.agent.replay writes them.
# the three arms, and ctx08 with one loop rule off (its ablation, 0009)
REPLAY_ARMS_RULE = "arm IN ('ctx08', 'current', 'mask10') OR arm LIKE 'ctx08-without-%'"

replay_run = Table(
    "replay_run",
    metadata,
    Column("run_id", String(200), ForeignKey("run.run_id"), nullable=False),
    Column("instance_id", String(200), nullable=False),
    Column("trajectory", Text, nullable=False),
    Column("trajectory_format", String(40), nullable=False),
    Column("resolved", Boolean),  # the evaluation's verdict on the recorded run
    Column("decisions", Integer, nullable=False),
    # the rebuilt tree gives exactly the run's submitted patch
    Column("tree_matches_submission", Boolean),
    Column("tree_lost_at_seq", Integer),  # the first decision whose tree is not the run's
    Column("tree_note", Text),
    Column("rerun_seconds", Float),  # re-running the run's commands in the sandbox
    Column("replay_seconds", Float),  # everything else: requests, windows, arms, anchors
    Column("created_at", String(32), nullable=False),
    PrimaryKeyConstraint("run_id", "instance_id"),
)

# A replay under way (0013): its row is written as the replay starts, its lease renewed
# at every step and the row removed with the run's replay rows or its undoing, so a row
# whose lease ran out is a replay stopped outright (SIGKILL) or cut off from its database
replay_in_progress = Table(
    "replay_in_progress",
    metadata,
    Column("run_id", String(200), ForeignKey("run.run_id"), nullable=False),
    Column("instance_id", String(200), nullable=False),
    Column("lease_id", String(32), nullable=False),  # one replay's, among others of the run
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", String(32), nullable=False),
    Column("renewed_at", String(32), nullable=False),
    # UTC, ISO 8601 as created_at: the replay writes again before it, or was stopped
    Column("expires_at", String(32), nullable=False),
    PrimaryKeyConstraint("run_id", "instance_id"),
)

replay_decision = Table(
    "replay_decision",
    metadata,
    Column("run_id", String(200), nullable=False),
    Column("instance_id", String(200), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("arm", String(40), nullable=False),
    Column("decision_id", Integer, ForeignKey("decision.decision_id")),  # the ctx08 window
    Column("prompt_tokens", Integer, nullable=False),
    Column("cached_tokens", Integer, nullable=False),  # the prefix shared with seq - 1
    Column("action_kind", String(20), nullable=False),  # edit | other | none | submit
    Column("tree_known", Boolean, nullable=False),
    Column("refused", Boolean, nullable=False),  # ctx08: the request was refused
    PrimaryKeyConstraint("run_id", "instance_id", "seq", "arm"),
    ForeignKeyConstraint(["run_id", "instance_id"],
                         ["replay_run.run_id", "replay_run.instance_id"]),
    CheckConstraint(REPLAY_ARMS_RULE, name="ck_replay_decision_arm"),
    CheckConstraint("action_kind IN ('edit', 'other', 'none', 'submit')",
                    name="ck_replay_decision_action_kind"),
    CheckConstraint("cached_tokens >= 0 AND cached_tokens <= prompt_tokens",
                    name="ck_replay_decision_cached_tokens"),
)

replay_anchor = Table(
    "replay_anchor",
    metadata,
    Column("run_id", String(200), nullable=False),
    Column("instance_id", String(200), nullable=False),
    Column("seq", Integer, nullable=False),  # the decision whose next action used it
    Column("anchor_no", Integer, nullable=False),
    Column("anchor_class", String(20), nullable=False),  # ctxdb.agent.anchors.AnchorClass
    Column("anchor_text", Text, nullable=False),
    Column("anchor_spelled", Text),  # an edit text as its sed pattern spelled it (escapes)
    Column("path", Text),
    Column("line", Integer),
    Column("held_by_seq", Integer),  # the newest earlier step whose observation held it
    PrimaryKeyConstraint("run_id", "instance_id", "seq", "anchor_no"),
    ForeignKeyConstraint(["run_id", "instance_id"],
                         ["replay_run.run_id", "replay_run.instance_id"]),
)

replay_anchor_outcome = Table(
    "replay_anchor_outcome",
    metadata,
    Column("run_id", String(200), nullable=False),
    Column("instance_id", String(200), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("anchor_no", Integer, nullable=False),
    Column("arm", String(40), nullable=False),
    Column("kept", Boolean, nullable=False),
    Column("fate", String(20)),  # where a lost anchor went (ctxdb.agent.replay.Fate)
    PrimaryKeyConstraint("run_id", "instance_id", "seq", "anchor_no", "arm"),
    ForeignKeyConstraint(
        ["run_id", "instance_id", "seq", "anchor_no"],
        ["replay_anchor.run_id", "replay_anchor.instance_id", "replay_anchor.seq",
         "replay_anchor.anchor_no"]),
    CheckConstraint(REPLAY_ARMS_RULE, name="ck_replay_anchor_outcome_arm"),
)

# Which view files are installed, and the sha256 of the text each was made from:
# the views are kept out of migration history (docs/design.md), so this is how a
# check can compare what the database holds with sql/views/.
installed_view = Table(
    "installed_view",
    metadata,
    Column("view_name", String(100), primary_key=True),
    Column("sql_sha256", String(64), nullable=False),
    # sha256 of the definition as the database's catalog reported it at install
    # time: a view replaced by hand afterwards no longer matches.
    Column("catalog_sha256", String(64), nullable=False),
    Column("installed_at", String(32), nullable=False),
)


def insert_ignoring_duplicates(connection, table: Table):
    """INSERT … ON CONFLICT DO NOTHING for the connection's dialect.

    Used for caches written by many workers at once, where a duplicate means
    another worker computed the same value first.
    """
    dialect = connection.dialect.name
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    raise NotImplementedError(f"unsupported database dialect {dialect!r}")


def insert_many(connection, table: Table, rows: list[dict], *, keep_existing: bool = False) -> None:
    """INSERT many rows (dicts with the same keys) through the driver's executemany."""
    if rows:
        columns = tuple(rows[0])
        values = operator.itemgetter(*columns)
        tuples = [(values(row),) for row in rows] if len(columns) == 1 else list(map(values, rows))
        insert_tuples(connection, table, columns, tuples, keep_existing=keep_existing)


def insert_tuples(connection, table: Table, columns: tuple[str, ...], rows: list[tuple], *,
                  keep_existing: bool = False, sparse: tuple[str, ...] = ()) -> None:
    """INSERT many rows, values in ``columns`` order, through the driver's executemany.

    A decision writes about a thousand pool and audit rows; building them as SQLAlchemy
    bound parameters costs more than the rest of the pipeline. Values still travel as
    parameters; only the column names (from the table definition) are in the text.
    ``keep_existing``: a row whose primary key is already there is skipped (content-
    addressed rows, written by many decisions and workers).
    ``sparse``: nullable columns that are usually NULL. Rows with all of them NULL are
    written by a statement that leaves them out (they get NULL all the same), the others
    by one that leaves out those NULL in every one of them, in the rows' order: the
    sqlite3 driver binds None several times slower than a number or a string. On other
    backends the rows go in one statement: a second would be another round trip.
    """
    if not rows:
        return
    if sparse:
        missing = [c for c in sparse if c not in columns]
        defaulted = [c for c in sparse if table.c[c].server_default is not None]
        if missing or defaulted:
            raise ValueError(f"table {table.name}: sparse columns {missing + defaulted} must be"
                             " among the columns and have no default")
        positions = [columns.index(c) for c in sparse]
        kept = tuple(i for i in range(len(columns)) if i not in positions)
        sparse_values = operator.itemgetter(*positions)
        all_null = None if len(positions) == 1 else (None,) * len(positions)
        if not kept:
            raise ValueError(f"table {table.name}: every column is sparse")
        if connection.dialect.name != "sqlite":
            _execute_insert(connection, table, columns, rows, keep_existing)
            return
        project = operator.itemgetter(*kept)
        thin, full = [], []
        for row in rows:
            if sparse_values(row) == all_null:
                thin.append(project(row))
            else:
                full.append(row)
        if len(kept) == 1:  # itemgetter of one index gives the value, not a 1-tuple
            thin = [(value,) for value in thin]
        _execute_insert(connection, table, tuple(columns[i] for i in kept), thin, keep_existing)
        # and the rest without the sparse columns none of them has a value in (the audit's
        # tokens_before: its ~130 rows with a detail would bind it as NULL each)
        unused = {p for p in positions if all(row[p] is None for row in full)}
        if full and unused:
            used = tuple(i for i in range(len(columns)) if i not in unused)
            full = list(map(operator.itemgetter(*used), full))
            _execute_insert(connection, table, tuple(columns[i] for i in used), full,
                            keep_existing)
        else:
            _execute_insert(connection, table, columns, full, keep_existing)
    else:
        _execute_insert(connection, table, columns, rows, keep_existing)


# Rows one SQLite INSERT carries (VALUES (…), (…), …): a statement of 32 rows costs
# ~15-20% less than 32 executemany steps (the pool's 260 rows: ~0.2 ms a table at 256
# items). Fixed, so the statement is prepared once and kept by the driver; 32 rows of
# evidence_item's 17 columns stay far under SQLite's bound on parameters (999 before
# 3.32).
SQLITE_ROWS_PER_INSERT = 32


def _execute_insert(connection, table: Table, columns: tuple[str, ...], rows: list[tuple],
                    keep_existing: bool) -> None:
    if not rows:
        return
    statement = insert_statement(connection.dialect, table, columns, keep_existing)
    if not _on_sqlite_driver(connection):
        connection.exec_driver_sql(statement, rows)
        return
    # On SQLite inside the connection's transaction (its BEGIN issued): the driver's own
    # executemany, as the gate's reads are — SQLAlchemy's execution costs ~15 µs a
    # statement, as much as a 16-row insert, and a 16-item decision makes ~17 of them.
    # Errors come out as SQLAlchemy's would (IntegrityError, OperationalError, …).
    # SQLITE_ROWS_PER_INSERT rows a statement while that many are left, then one a row
    whole = len(rows) - len(rows) % SQLITE_ROWS_PER_INSERT
    driver = connection.connection.driver_connection
    try:
        if whole:
            statement = insert_statement(connection.dialect, table, columns, keep_existing,
                                         SQLITE_ROWS_PER_INSERT)
            driver.executemany(statement, [
                tuple(chain.from_iterable(rows[start:start + SQLITE_ROWS_PER_INSERT]))
                for start in range(0, whole, SQLITE_ROWS_PER_INSERT)])
        if whole < len(rows):
            statement = insert_statement(connection.dialect, table, columns, keep_existing)
            driver.executemany(statement, rows[whole:])
    except sqlite3.Error as exc:
        raise DBAPIError.instance(statement, rows, exc, sqlite3.Error,
                                  dialect=connection.dialect, ismulti=True) from exc


def data_version(connection) -> int:
    """SQLite's ``PRAGMA data_version`` of the store on ``connection``, in its current
    transaction: it moves when another connection commits to the file (only then), so
    two equal readings on one connection mean nothing was committed in between."""
    return int(execute_driver(connection, "PRAGMA data_version", ()).fetchone()[0])


def flag_type(connection) -> type[int] | type[bool]:
    """What a boolean column's values are bound as: 0 and 1 on SQLite, whose driver sends
    a Python bool through its adaptation lookup (~1.5 µs a value more than an int; a
    256-item decision binds ~700), bools elsewhere (PostgreSQL's boolean columns take no
    integers). SQLite stores either as the same integer."""
    return int if connection.dialect.name == "sqlite" else bool


def _on_sqlite_driver(connection) -> bool:
    """Whether statements may go to the sqlite3 driver directly: SQLite, inside the
    connection's transaction (so its BEGIN was issued)."""
    return connection.dialect.name == "sqlite" and connection.in_transaction()


def insert_row(connection, table: Table, values: dict[str, object], returning=None) -> object:
    """INSERT one row (``values`` by column); the value of ``returning`` (a column of
    ``table``) it was given, when named. On SQLite in a transaction through the driver —
    a Core INSERT … RETURNING costs ~60 µs there against ~15 — and ``returning`` must then
    be the table's INTEGER PRIMARY KEY (its rowid); elsewhere a Core INSERT."""
    if not _on_sqlite_driver(connection):
        statement = insert(table)
        if returning is None:
            connection.execute(statement, values)
            return None
        return connection.execute(statement.returning(returning), values).scalar_one()
    if returning is not None and (list(table.primary_key.columns) != [returning]
                                  or not isinstance(returning.type, Integer)):
        raise ValueError(f"table {table.name}: only its INTEGER PRIMARY KEY (the rowid) is "
                         "returned on SQLite")
    cursor = execute_driver(connection, insert_statement(connection.dialect, table, tuple(values)),
                            tuple(values.values()))
    return None if returning is None else cursor.lastrowid


def execute_driver(connection, sql: str, parameters: tuple) -> sqlite3.Cursor:
    """One statement on the sqlite3 driver inside ``connection``'s transaction (its BEGIN
    issued), errors as SQLAlchemy's would be: ~15 µs less than through SQLAlchemy."""
    try:
        return connection.connection.driver_connection.execute(sql, parameters)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(sql, parameters, exc, sqlite3.Error,
                                  dialect=connection.dialect) from exc
