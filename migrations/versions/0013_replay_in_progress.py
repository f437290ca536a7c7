"""A replay under way, told from one stopped outright (issue 22's operator trial).

- `replay_in_progress`: a replay writes its row (host, pid, a lease) as it starts, renews
  the lease at every step and removes the row with the run's replay rows, or with its
  undoing. `ctxdb verify` listed a replay still running among the decisions of one
  killed (`replay_decisions_without_their_run`): both lack their `replay_run` row. Now a
  replay whose lease holds is named in a note, and only one whose lease ran out counts.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replay_in_progress",
        sa.Column("run_id", sa.String(200), sa.ForeignKey("run.run_id"), nullable=False),
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("lease_id", sa.String(32), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", sa.String(32), nullable=False),
        sa.Column("renewed_at", sa.String(32), nullable=False),
        sa.Column("expires_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "instance_id"),
    )


def downgrade() -> None:
    op.drop_table("replay_in_progress")
