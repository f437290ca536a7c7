"""The evidence store's first schema: runs, decisions and their pools, the audit log,
windows, budget and ranking logs, caches, outcomes and gold facts.

A migration is a frozen record of what the schema was; it does not import
ctxdb.models, which describes head.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("arm", sa.String(20), nullable=False, server_default="ctx08"),
        sa.Column("variant", sa.String(100), nullable=False, server_default="default"),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("settings_json", sa.Text, nullable=False, server_default="{}"),
        sa.Column("note", sa.Text),
        sa.CheckConstraint("arm IN ('ctx08', 'current')", name="ck_run_arm"),
    )
    op.create_table(
        "decision",
        sa.Column("decision_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(200), sa.ForeignKey("run.run_id"), nullable=False),
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("decision_type", sa.String(20), nullable=False),
        sa.Column("task_text", sa.Text, nullable=False),
        sa.Column("decision_question", sa.Text),
        # The request exactly as the harness sent it: nothing the user gave is lost.
        sa.Column("request_json", sa.Text, nullable=False),
        sa.Column("request_sha256", sa.String(64), nullable=False),
        # Every window records which tokenizer counted it (docs/tokens.md).
        sa.Column("tokenizer", sa.String(40), nullable=False),
        sa.Column("token_ceiling", sa.Integer, nullable=False),
        sa.Column("token_count", sa.Integer),
        sa.Column("flags", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.UniqueConstraint("run_id", "instance_id", "seq", name="uq_decision_run_instance_seq"),
        sa.CheckConstraint(
            "decision_type IN ('localize', 'edit', 'repair', 'other')", name="ck_decision_type"
        ),
    )
    op.create_table(
        "obligation",
        sa.Column("decision_id", sa.Integer, sa.ForeignKey("decision.decision_id"), nullable=False),
        sa.Column("obligation_no", sa.Integer, nullable=False),
        sa.Column("source", sa.String(10), nullable=False),
        sa.Column("node_id", sa.String(200)),
        sa.Column("obligation_text", sa.Text, nullable=False),
        sa.Column("target_entity", sa.Text),
        sa.Column("preconditions_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("required_validation_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("acceptance_criteria_json", sa.Text, nullable=False, server_default="[]"),
        sa.Column("insertion_path", sa.Text),
        sa.Column("insertion_line", sa.Integer),
        sa.PrimaryKeyConstraint("decision_id", "obligation_no"),
    )
    op.create_table(
        "impact_edge",
        sa.Column("decision_id", sa.Integer, sa.ForeignKey("decision.decision_id"), nullable=False),
        sa.Column("edge_no", sa.Integer, nullable=False),
        sa.Column("head_entity", sa.Text, nullable=False),
        sa.Column("tail_entity", sa.Text, nullable=False),
        sa.Column("edge_kind", sa.String(30), nullable=False),
        sa.Column("depth", sa.Integer, nullable=False),
        # '06' when the harness gave the DAG, 'recon' when assembly derived it.
        sa.Column("origin", sa.String(10), nullable=False),
        sa.PrimaryKeyConstraint("decision_id", "edge_no"),
        sa.CheckConstraint(
            "edge_kind IN ('CalledBy', 'ConfigConsumer', 'SchemaConsumer', 'PreserveObligation')",
            name="ck_impact_edge_kind",
        ),
        sa.CheckConstraint("depth >= 1", name="ck_impact_edge_depth"),
    )
    op.create_table(
        "evidence_item",
        sa.Column("decision_id", sa.Integer, sa.ForeignKey("decision.decision_id"), nullable=False),
        sa.Column("item_id", sa.String(16), nullable=False),
        sa.Column("item_no", sa.Integer, nullable=False),
        sa.Column("source", sa.String(10), nullable=False),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("entity_key", sa.Text),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("content_sha256", sa.String(64), nullable=False),
        # §3.1 caps content at 8 KB; the full text stays here so nothing is lost.
        sa.Column("original_content", sa.Text),
        sa.Column("provenance", sa.String(200), nullable=False),
        sa.Column("score", sa.Float),
        sa.Column("arrival_no", sa.Integer),
        sa.Column("path", sa.Text),
        sa.Column("start_line", sa.Integer),
        sa.Column("end_line", sa.Integer),
        sa.Column("signature", sa.Text),
        sa.PrimaryKeyConstraint("decision_id", "item_id"),
        sa.UniqueConstraint("decision_id", "item_no", name="uq_evidence_item_no"),
        sa.CheckConstraint(
            "source IN ('03', '04', '05', '06', '07', 'patch', 'live')", name="ck_evidence_source"
        ),
        sa.CheckConstraint(
            "kind IN ('source_code', 'symbol', 'retrieved_hit', 'fault_entity', 'changed_entity',"
            " 'graph_edge', 'config', 'downstream_obligation', 'plan_node', 'acceptance_criteria',"
            " 'patch', 'error', 'traceback', 'tool_output', 'test_output')",
            name="ck_evidence_kind",
        ),
    )
    op.create_index("ix_evidence_item_entity", "evidence_item", ["decision_id", "entity_key"])
    op.create_table(
        "representation_policy",
        sa.Column("policy_set", sa.String(60), nullable=False),
        sa.Column("role", sa.String(40), nullable=False),
        sa.Column("evidence_class", sa.Text, nullable=False),
        sa.Column("rendering", sa.String(20), nullable=False),
        sa.Column("rule", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("policy_set", "role"),
        sa.CheckConstraint(
            "rendering IN ('verbatim', 'signature', 'digest', 'truncated', 'omitted')",
            name="ck_policy_rendering",
        ),
    )
    op.create_table(
        "item_event",
        sa.Column("event_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("decision_id", sa.Integer, nullable=False),
        sa.Column("item_id", sa.String(16), nullable=False),
        sa.Column("event_no", sa.Integer, nullable=False),
        sa.Column("stage", sa.String(20), nullable=False),
        sa.Column("action", sa.String(30), nullable=False),
        sa.Column("driver", sa.Text),
        sa.Column("tokens_before", sa.Integer),
        sa.Column("tokens_after", sa.Integer),
        sa.Column("is_final", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("detail", sa.Text),
        sa.ForeignKeyConstraint(
            ["decision_id", "item_id"], ["evidence_item.decision_id", "evidence_item.item_id"]
        ),
    )
    op.create_index("ix_item_event_item", "item_event", ["decision_id", "item_id"])
    op.create_table(
        "window_item",
        sa.Column("decision_id", sa.Integer, sa.ForeignKey("decision.decision_id"), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("item_id", sa.String(16), nullable=False),
        sa.Column("role", sa.String(40), nullable=False),
        sa.Column("rendering", sa.String(20), nullable=False),
        sa.Column("tier", sa.String(20), nullable=False),
        sa.Column("block", sa.String(10), nullable=False),
        sa.Column("edge_critical", sa.Boolean, nullable=False),
        sa.Column("token_count", sa.Integer, nullable=False),
        sa.Column("rendered_text", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("decision_id", "position"),
        sa.ForeignKeyConstraint(
            ["decision_id", "item_id"], ["evidence_item.decision_id", "evidence_item.item_id"]
        ),
        sa.CheckConstraint(
            "tier IN ('stable_core', 'working_set', 'transient')", name="ck_window_tier"
        ),
        sa.CheckConstraint("block IN ('front', 'middle', 'back')", name="ck_window_block"),
    )
    op.create_table(
        "budget_log",
        sa.Column("decision_id", sa.Integer, sa.ForeignKey("decision.decision_id"), nullable=False),
        sa.Column("step_no", sa.Integer, nullable=False),
        sa.Column("ladder_step", sa.String(40), nullable=False),
        sa.Column("item_id", sa.String(16)),
        sa.Column("tokens_before", sa.Integer, nullable=False),
        sa.Column("tokens_after", sa.Integer, nullable=False),
        sa.Column("detail", sa.Text),
        sa.PrimaryKeyConstraint("decision_id", "step_no"),
    )
    op.create_table(
        "rank_call",
        sa.Column("rank_call_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("decision_id", sa.Integer, sa.ForeignKey("decision.decision_id"), nullable=False),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("base_url", sa.Text, nullable=False),
        sa.Column("request_json", sa.Text, nullable=False),
        sa.Column("response_text", sa.Text),
        sa.Column("parse_status", sa.String(40), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("latency_ms", sa.Float),
        sa.Column("prompt_tokens", sa.Integer),
        sa.Column("completion_tokens", sa.Integer),
        sa.Column("created_at", sa.String(32), nullable=False),
        # §4: the L column is reached once per decision.
        sa.UniqueConstraint("decision_id", name="uq_rank_call_one_per_decision"),
    )
    op.create_table(
        "rank_score",
        sa.Column(
            "rank_call_id", sa.Integer, sa.ForeignKey("rank_call.rank_call_id"), nullable=False
        ),
        sa.Column("item_id", sa.String(16), nullable=False),
        sa.Column("relevance_score", sa.Float),
        sa.Column("verdict", sa.String(10), nullable=False),
        sa.PrimaryKeyConstraint("rank_call_id", "item_id"),
    )
    op.create_table(
        "token_count_cache",
        sa.Column("tokenizer", sa.String(40), nullable=False),
        sa.Column("content_sha256", sa.String(64), nullable=False),
        sa.Column("token_count", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("tokenizer", "content_sha256"),
    )
    op.create_table(
        "outcome",
        sa.Column("run_id", sa.String(200), sa.ForeignKey("run.run_id"), nullable=False),
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("solved", sa.Boolean, nullable=False),
        sa.Column("cost_usd", sa.Float),
        sa.Column("model_tokens_in", sa.Integer),
        sa.Column("model_tokens_out", sa.Integer),
        sa.Column("recorded_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "instance_id"),
    )
    op.create_table(
        "gold_fact",
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("fact_no", sa.Integer, nullable=False),
        sa.Column("fact_kind", sa.String(30), nullable=False),
        sa.Column("entity_key", sa.Text, nullable=False),
        sa.Column("detail", sa.Text),
        sa.PrimaryKeyConstraint("instance_id", "fact_no"),
    )
    # Views live in sql/views/ outside migration history; this table is how a
    # check compares what the database holds with those files.
    op.create_table(
        "installed_view",
        sa.Column("view_name", sa.String(100), primary_key=True),
        sa.Column("sql_sha256", sa.String(64), nullable=False),
        sa.Column("catalog_sha256", sa.String(64), nullable=False),
        sa.Column("installed_at", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    for table in (
        "installed_view",
        "gold_fact",
        "outcome",
        "token_count_cache",
        "rank_score",
        "rank_call",
        "budget_log",
        "window_item",
        "item_event",
        "representation_policy",
        "evidence_item",
        "impact_edge",
        "obligation",
        "decision",
        "run",
    ):
        op.drop_table(table)
