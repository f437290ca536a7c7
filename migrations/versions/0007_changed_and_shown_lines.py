"""Lines, so recall can ask "is the changed code itself in the window?", and the
plan node's dependencies (issue 10).

- `gold_fact.changed_start_line`, `changed_end_line`: the first and last base-commit
  line the gold patch changes inside the fact (for an insertion, the lines on both
  sides of it). A module-level hunk is its own fact, keyed `path:START-END`.
- `gold_fact.head_text`: a def/class fact's def/class line (decorators skipped), so recall "in any
  rendering" can credit a skeleton or a body of its file that shows that line.
- `window_item.shown_start_line`, `shown_end_line`: the file lines whose text the item
  shows — its whole span when verbatim, the kept lines when cut or sliced; NULL when
  it shows no body (a signature, a pointer, a digest, a head-kept truncation).
- `item_nearness.near_score`: the documented nearness score (ctxdb.pipeline.gate_inputs);
  the gate leaves an item residual only when it reaches the threshold.
- `obligation.insertion_end_line`: the last line of the edit site, when it spans lines.
- `obligation.dependencies_json`: the entity keys the obligation depends on (spec §3.2
  driver 1), each a `decision_link` of kind `obligation_dependency`, which admits.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


LINK_KIND = "obligation_dependency"
LINK_MEANING = "an entity the plan node lists as a dependency of its obligation"
# every decision type: a dependency the planner names is driver 1 whatever the decision
DECISION_TYPES = ("localize", "edit", "repair", "other")


def upgrade() -> None:
    with op.batch_alter_table("item_nearness") as batch:
        batch.add_column(sa.Column("near_score", sa.Float, nullable=False, server_default="0"))
    with op.batch_alter_table("obligation") as batch:
        batch.add_column(sa.Column("dependencies_json", sa.Text, nullable=False,
                                   server_default="[]"))
        batch.add_column(sa.Column("insertion_end_line", sa.Integer))
    policy = sa.table("gate_link_policy", sa.column("decision_type", sa.String),
                      sa.column("link_kind", sa.String), sa.column("meaning", sa.Text))
    op.bulk_insert(policy, [{"decision_type": t, "link_kind": LINK_KIND, "meaning": LINK_MEANING}
                            for t in DECISION_TYPES])
    with op.batch_alter_table("gold_fact") as batch:
        batch.add_column(sa.Column("changed_start_line", sa.Integer))
        batch.add_column(sa.Column("changed_end_line", sa.Integer))
        batch.add_column(sa.Column("head_text", sa.Text))
    with op.batch_alter_table("window_item") as batch:
        batch.add_column(sa.Column("shown_start_line", sa.Integer))
        batch.add_column(sa.Column("shown_end_line", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("window_item") as batch:
        batch.drop_column("shown_end_line")
        batch.drop_column("shown_start_line")
    with op.batch_alter_table("gold_fact") as batch:
        batch.drop_column("head_text")
        batch.drop_column("changed_end_line")
        batch.drop_column("changed_start_line")
    op.execute(sa.text("DELETE FROM gate_link_policy WHERE link_kind = :kind")
               .bindparams(kind=LINK_KIND))
    with op.batch_alter_table("obligation") as batch:
        batch.drop_column("insertion_end_line")
        batch.drop_column("dependencies_json")
    with op.batch_alter_table("item_nearness") as batch:
        batch.drop_column("near_score")
