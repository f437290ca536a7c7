"""Evidence texts stored once, by content hash; cheaper checks on the pool's hot table.

- `evidence_text(content_sha256, content)`: every text a pool item held, once. A
  harness asks about the same symbols decision after decision; each decision wrote
  their bodies again (about 200 KB per 256-item decision, most of a commit's cost, and
  19 GB per 100k decisions of that size). `evidence_item.content_sha256` now refers to
  it, and `evidence_item.original_sha256` (new) to the uncut text of an item cut at the
  §3.1 cap, replacing the `content` and `original_content` columns. The view
  `v_evidence_item` shows the pool with its texts, in the old column order.
- `evidence_item`'s source and kind checks are written as OR chains of equalities:
  SQLite evaluates an IN list in a CHECK by building a temporary index for every row
  (1.6 ms of a 256-item decision's writes, measured); the rule is the same.
- `ix_impact_edge_tail`: the gate looks up the direct impact edges into each pool
  item by its entity.

On SQLite `evidence_item` is rebuilt (batch copy-and-swap); every row is kept.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The closed enums as they stand at this revision (not imported: a migration is history).
SOURCES = ("03", "04", "05", "06", "07", "patch", "live")
KINDS = (
    "source_code", "symbol", "retrieved_hit", "fault_entity", "changed_entity", "graph_edge",
    "config", "downstream_obligation", "plan_node", "acceptance_criteria", "patch", "error",
    "traceback", "tool_output", "test_output",
)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _any_of(column: str, values) -> str:
    return " OR ".join(f"{column} = '{value}'" for value in values)


def _in_list(column: str, values) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    connection = op.get_bind()
    op.create_table(
        "evidence_text",
        sa.Column("content_sha256", sa.String(64), primary_key=True),
        sa.Column("content", sa.Text, nullable=False),
        comment="Each distinct pool text once; evidence_item rows refer to it by hash.",
    )
    # ctxdb always wrote content_sha256 = sha256(content). Where one hash stands for two
    # different texts (hand-made rows), those rows get the hash of their own text, so no
    # text is lost when each hash keeps one.
    conflicting = connection.execute(sa.text(
        "SELECT content_sha256 FROM evidence_item GROUP BY content_sha256"
        " HAVING COUNT(DISTINCT content) > 1"
    )).scalars().all()
    for shared in conflicting:
        rows = connection.execute(sa.text(
            "SELECT decision_id, item_id, content FROM evidence_item WHERE content_sha256 = :h"
        ), {"h": shared}).all()
        connection.execute(sa.text(
            "UPDATE evidence_item SET content_sha256 = :digest"
            " WHERE decision_id = :decision_id AND item_id = :item_id"
        ), [{"digest": _sha256(content), "decision_id": d, "item_id": i} for d, i, content in rows])
    connection.execute(sa.text(
        "INSERT INTO evidence_text (content_sha256, content)"
        " SELECT content_sha256, MIN(content) FROM evidence_item GROUP BY content_sha256"
    ))
    op.add_column("evidence_item", sa.Column("original_sha256", sa.String(64)))
    originals = connection.execute(sa.text(
        "SELECT decision_id, item_id, original_content FROM evidence_item"
        " WHERE original_content IS NOT NULL"
    )).all()
    if originals:
        digests = [(d, i, _sha256(original), original) for d, i, original in originals]
        connection.execute(sa.text(
            "INSERT INTO evidence_text (content_sha256, content) VALUES (:digest, :original)"
            " ON CONFLICT (content_sha256) DO NOTHING"
        ), [{"digest": h, "original": o} for _d, _i, h, o in digests])
        connection.execute(sa.text(
            "UPDATE evidence_item SET original_sha256 = :digest"
            " WHERE decision_id = :decision_id AND item_id = :item_id"
        ), [{"digest": h, "decision_id": d, "item_id": i} for d, i, h, _o in digests])
    with op.batch_alter_table("evidence_item") as batch:
        batch.drop_constraint("ck_evidence_source", type_="check")
        batch.drop_constraint("ck_evidence_kind", type_="check")
        batch.drop_column("content")
        batch.drop_column("original_content")
        batch.create_check_constraint("ck_evidence_source", _any_of("source", SOURCES))
        batch.create_check_constraint("ck_evidence_kind", _any_of("kind", KINDS))
        batch.create_foreign_key("fk_evidence_item_content", "evidence_text",
                                 ["content_sha256"], ["content_sha256"])
        batch.create_foreign_key("fk_evidence_item_original", "evidence_text",
                                 ["original_sha256"], ["content_sha256"])
    op.create_index("ix_impact_edge_tail", "impact_edge",
                    ["decision_id", "tail_entity", "depth", "edge_no"])


def downgrade() -> None:
    op.drop_index("ix_impact_edge_tail", "impact_edge")
    connection = op.get_bind()
    with op.batch_alter_table("evidence_item") as batch:
        batch.add_column(sa.Column("content", sa.Text))
        batch.add_column(sa.Column("original_content", sa.Text))
    connection.execute(sa.text(
        "UPDATE evidence_item SET content = (SELECT t.content FROM evidence_text t"
        " WHERE t.content_sha256 = evidence_item.content_sha256),"
        " original_content = (SELECT t.content FROM evidence_text t"
        " WHERE t.content_sha256 = evidence_item.original_sha256)"
    ))
    with op.batch_alter_table("evidence_item") as batch:
        batch.drop_constraint("fk_evidence_item_content", type_="foreignkey")
        batch.drop_constraint("fk_evidence_item_original", type_="foreignkey")
        batch.drop_constraint("ck_evidence_source", type_="check")
        batch.drop_constraint("ck_evidence_kind", type_="check")
        batch.drop_column("original_sha256")
        batch.alter_column("content", existing_type=sa.Text, nullable=False)
        batch.create_check_constraint("ck_evidence_source", _in_list("source", SOURCES))
        batch.create_check_constraint("ck_evidence_kind", _in_list("kind", KINDS))
    op.drop_table("evidence_text")
