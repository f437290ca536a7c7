"""Two fewer b-trees on the pool table, which a 256-item decision writes 256 rows into.

- `uq_evidence_item_no` (decision_id, item_no) becomes the check
  `item_id = 'E' || item_no`: with the primary key (decision_id, item_id) it keeps
  item numbers unique per decision, without a second index to maintain.
- `ix_evidence_item_entity` (decision_id, entity_key) is dropped: no view or stage
  looks items up by entity; every query reaching the pool by decision uses the
  primary key's decision_id prefix (at most 256 rows).

On SQLite `evidence_item` is rebuilt (batch copy-and-swap); every row is kept.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ITEM_ID_RULE = "item_id = 'E' || item_no"


def upgrade() -> None:
    op.drop_index("ix_evidence_item_entity", "evidence_item")
    with op.batch_alter_table("evidence_item") as batch:
        batch.drop_constraint("uq_evidence_item_no", type_="unique")
        batch.create_check_constraint("ck_evidence_item_id", ITEM_ID_RULE)


def downgrade() -> None:
    with op.batch_alter_table("evidence_item") as batch:
        batch.drop_constraint("ck_evidence_item_id", type_="check")
        batch.create_unique_constraint("uq_evidence_item_no", ["decision_id", "item_no"])
    op.create_index("ix_evidence_item_entity", "evidence_item", ["decision_id", "entity_key"])
