"""A window's items found by their pool item (issue 22).

- `ix_window_item_item` (decision_id, item_id): the primary key finds a window's item by
  its position; reading a pool with what its window did with each item (the loop's
  previous window, `adapter.settled_parts`; `window_recall`; `v_window_item_gold`) looked
  each item up by scanning the whole window — 9.6 ms for one 260-item decision of the
  longest development run, a fifth of a late loop step. With the index: under 1 ms.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_window_item_item", "window_item", ["decision_id", "item_id"])


def downgrade() -> None:
    op.drop_index("ix_window_item_item", "window_item")
