"""Gate inputs: the decision's structural links, nearness of unlinked items, the
source-priority and link-policy tables, the pool flag; and re-constructible decisions.

- `decision_link`: the entities the current obligation structurally reaches
  (target, change targets, validation tests and what they call, traceback
  frames, identifiers named in the criteria, the insertion point), copied from
  recon at assembly so the gate view needs no attached database.
- `item_nearness`: why an unlinked item is "near" the decision (shared
  identifiers, a two-hop recon link) — the gate's residual set.
- `source_priority`: spec §3.1's queue order, as data the gate's 64-item cap
  reads (§3.2).
- `gate_link_policy`: which link kinds admit for which decision type, as data,
  so an ablation can switch one off without a code change.
- `evidence_item.in_pool`: false for items past the 256-item pool cap;
  `evidence_item.fact_key`: the item's §3.5 fact identity.
- The unique (run, instance, seq) constraint is dropped: constructing the same
  request again is allowed (and must give a byte-identical window), so a
  decision is identified by its id; an index keeps lookups fast. On SQLite this
  is a batch (copy-and-swap) operation, which is why views are dropped around
  upgrades.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

SOURCE_PRIORITY_ROWS = [
    # (source, priority, why) — lower is kept first
    ("07", 0, "plan obligations first (§3.1)"),
    ("05", 0, "the localized change target ranks with the plan node"),
    ("06", 1, "impact edges next"),
    ("04", 2, "retrieved hits next"),
    ("03", 3, "recon next"),
    ("live", 4, "live state next"),
    ("patch", 4, "the current patch is live state"),
]

LINK_KINDS = {
    "target_entity": "the plan node's target entity",
    "change_target": "a fault/changed entity from 05",
    "insertion_point": "the symbol holding the edit's insertion point",
    "validation_test": "a test named in required_validation",
    "validation_callee": "a symbol a required-validation test calls directly (recon tests edge)",
    "traceback_frame": "a symbol on a frame of a live or pasted traceback",
    "named_in_criteria": "an identifier in the obligation, criteria or question naming one symbol",
    # not a link of the obligation but the §3.3 digest of the change target's wider
    # impact DAG: the gate admits it as impact-driven (impact:transitive_digest)
    "impact_digest": "the one-line digest of the change target's transitive impact",
}

# Which links admit for which decision type. A localize decision has no target
# yet, so it is reached through the failing tests, their callees, traceback
# frames and named identifiers; an edit or repair decision through everything.
LINK_POLICY = {
    "localize": ["validation_test", "validation_callee", "traceback_frame", "named_in_criteria"],
    "edit": list(LINK_KINDS),
    "repair": list(LINK_KINDS),
    "other": ["target_entity", "change_target", "validation_test", "named_in_criteria",
              "impact_digest"],
}


def upgrade() -> None:
    op.create_table(
        "decision_link",
        sa.Column("decision_id", sa.Integer, sa.ForeignKey("decision.decision_id"), nullable=False),
        sa.Column("link_no", sa.Integer, nullable=False),
        sa.Column("link_kind", sa.String(30), nullable=False),
        sa.Column("entity_key", sa.Text, nullable=False),
        sa.Column("path", sa.Text),
        sa.Column("start_line", sa.Integer),
        sa.Column("end_line", sa.Integer),
        sa.Column("detail", sa.Text),  # what produced the link (test id, frame, identifier)
        sa.PrimaryKeyConstraint("decision_id", "link_no"),
    )
    op.create_index("ix_decision_link_entity", "decision_link", ["decision_id", "entity_key"])
    op.create_table(
        "item_nearness",
        sa.Column("decision_id", sa.Integer, nullable=False),
        sa.Column("item_id", sa.String(16), nullable=False),
        sa.Column("shared_terms", sa.Text, nullable=False, server_default=""),
        sa.Column("recon_hops", sa.Integer),
        sa.Column("nearest_link_no", sa.Integer),  # the obligation bucket a fold would use
        sa.PrimaryKeyConstraint("decision_id", "item_id"),
        sa.ForeignKeyConstraint(
            ["decision_id", "item_id"], ["evidence_item.decision_id", "evidence_item.item_id"]
        ),
    )
    source_priority = op.create_table(
        "source_priority",
        sa.Column("source", sa.String(10), primary_key=True),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("why", sa.Text, nullable=False),
    )
    op.bulk_insert(
        source_priority,
        [{"source": s, "priority": p, "why": w} for s, p, w in SOURCE_PRIORITY_ROWS],
    )
    link_policy = op.create_table(
        "gate_link_policy",
        sa.Column("decision_type", sa.String(20), nullable=False),
        sa.Column("link_kind", sa.String(30), nullable=False),
        sa.Column("meaning", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("decision_type", "link_kind"),
    )
    op.bulk_insert(
        link_policy,
        [
            {"decision_type": t, "link_kind": k, "meaning": LINK_KINDS[k]}
            for t, kinds in LINK_POLICY.items()
            for k in kinds
        ],
    )
    op.add_column(
        "evidence_item",
        sa.Column("in_pool", sa.Boolean, nullable=False, server_default=sa.true()),
    )
    # §3.5 fact identity, so duplicates can be grouped in SQL (v_duplicate_fact).
    op.add_column("evidence_item", sa.Column("fact_key", sa.Text))
    op.create_index("ix_evidence_item_fact", "evidence_item", ["decision_id", "fact_key"])
    with op.batch_alter_table("decision") as batch:
        batch.drop_constraint("uq_decision_run_instance_seq", type_="unique")
    op.create_index("ix_decision_run_instance_seq", "decision", ["run_id", "instance_id", "seq"])


def downgrade() -> None:
    op.drop_index("ix_decision_run_instance_seq", "decision")
    with op.batch_alter_table("decision") as batch:
        batch.create_unique_constraint(
            "uq_decision_run_instance_seq", ["run_id", "instance_id", "seq"]
        )
    op.drop_index("ix_evidence_item_fact", "evidence_item")
    with op.batch_alter_table("evidence_item") as batch:
        batch.drop_column("fact_key")
        batch.drop_column("in_pool")
    for table in ("gate_link_policy", "source_priority", "item_nearness", "decision_link"):
        op.drop_table(table)
