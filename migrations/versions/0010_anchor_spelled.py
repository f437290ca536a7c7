"""An edit anchor's text as the command spelled it (issue 22).

- `replay_anchor.anchor_spelled`: for an edit text taken from a sed pattern with escapes
  (`\\[` for `[`), the pattern as the command wrote it; NULL otherwise. An agent redoing
  an edit its window shows copies that spelling, so the window holds the anchor when it
  holds either (`ctxdb.agent.anchors.WindowIndex.keeps`). Anchors recorded before this
  revision have none: replay their runs again to measure them so.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("replay_anchor") as batch:
        batch.add_column(sa.Column("anchor_spelled", sa.Text))


def downgrade() -> None:
    # the spelling only widens what counts as kept: the outcomes recorded with it stay
    with op.batch_alter_table("replay_anchor") as batch:
        batch.drop_column("anchor_spelled")
