"""A/B protocol (§7): gold facts get their span; the representation ablations are
policy sets (§7.5 "remove each representation choice"), not code.

- `gold_fact.path`, `start_line`, `end_line`: where the needed fact sits in the base
  commit, so gold recall can credit a window item whose verbatim span holds it.
- policy sets `all_verbatim`, `no_signatures` (bodies instead of signatures) and
  `no_digests` (the transitive impact digest omitted), each a copy of `spec` with
  one choice changed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

ABLATION_SETS = {
    # set name: (rendering to replace, or * for every non-omitted one; replacement)
    "all_verbatim": ("*", "verbatim"),
    "no_signatures": ("signature", "verbatim"),
    "no_digests": ("digest", "omitted"),
}


def upgrade() -> None:
    with op.batch_alter_table("gold_fact") as batch:
        batch.add_column(sa.Column("path", sa.Text))
        batch.add_column(sa.Column("start_line", sa.Integer))
        batch.add_column(sa.Column("end_line", sa.Integer))
    policy = sa.table(
        "representation_policy",
        sa.column("policy_set", sa.String),
        sa.column("role", sa.String),
        sa.column("evidence_class", sa.Text),
        sa.column("rendering", sa.String),
        sa.column("rule", sa.Text),
    )
    connection = op.get_bind()
    spec_rows = connection.execute(
        sa.select(policy.c.role, policy.c.evidence_class, policy.c.rendering, policy.c.rule)
        .where(policy.c.policy_set == "spec")
        .order_by(policy.c.role)
    ).all()
    rows = []
    for name, (replace, replacement) in ABLATION_SETS.items():
        for role, evidence_class, rendering, rule in spec_rows:
            changed = rendering != "omitted" and (replace == "*" or rendering == replace)
            rows.append({
                "policy_set": name,
                "role": role,
                "evidence_class": evidence_class,
                "rendering": replacement if changed else rendering,
                "rule": f"ablation {name}: {rule}" if changed else rule,
            })
    op.bulk_insert(policy, rows)


def downgrade() -> None:
    for name in ABLATION_SETS:
        op.execute(
            sa.text("DELETE FROM representation_policy WHERE policy_set = :name").bindparams(
                name=name
            )
        )
    with op.batch_alter_table("gold_fact") as batch:
        batch.drop_column("end_line")
        batch.drop_column("start_line")
        batch.drop_column("path")
