"""Seed the representation policy with the spec's §3.3 table, as rows.

The table is data, not code, so an ablation variant (§7.5 "remove each
representation choice") is another `policy_set`, not a code change. A
(kind × role) pair with no row defaults to `signature` and is logged as a
table miss by the render stage (§3.3 caps).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SPEC_POLICY_SET = "spec"

# (role, the table's "Evidence kind", rendering, the table's rule), §3.3 row by row.
SPEC_TABLE = [
    ("change_target", "change target (fault/changed entity, 05/06)", "verbatim",
     "the code being edited"),
    ("insertion_point", "insertion-point code", "verbatim",
     "the code immediately before/at the edit site: the strongest edit-conditioning signal"),
    ("requirement", "requirement + acceptance criteria (07)", "verbatim",
     "the goal the current obligation serves"),
    ("related_symbol", "related symbols (03 recon, 04 hits)", "signature",
     "name, params, return, one-line doc; never body unless the decision must reason over it"),
    ("direct_impact", "impact neighborhood (06 direct edges)", "signature",
     "signatures + only the call sites of direct obligations, never full consumer bodies"),
    ("transitive_impact", "wider impact DAG (06 transitive)", "digest",
     "a fixed one-line structured digest of the downstream reach"),
    ("test_reasoned_over", "a related test (07 validation / 04 hit)", "verbatim",
     "body, because the decision reasons over the test"),
    ("test_named", "a related test (07 validation / 04 hit)", "signature",
     "its name + one-line expectation, because the decision does not reason over it"),
    ("config_consumer", "config / schema consumer (06)", "signature",
     "signature of the consumed schema + the consumer binding line"),
    ("live_current", "patch / error / traceback / test output (live)", "verbatim",
     "the current failing state: freshly relevant, short-lived"),
    ("stale", "stale or superseded item (live history)", "omitted",
     "already falsified or an old version: dropped before ordering (P6)"),
]


def upgrade() -> None:
    policy = sa.table(
        "representation_policy",
        sa.column("policy_set", sa.String),
        sa.column("role", sa.String),
        sa.column("evidence_class", sa.Text),
        sa.column("rendering", sa.String),
        sa.column("rule", sa.Text),
    )
    op.bulk_insert(
        policy,
        [
            {
                "policy_set": SPEC_POLICY_SET,
                "role": role,
                "evidence_class": evidence_class,
                "rendering": rendering,
                "rule": rule,
            }
            for role, evidence_class, rendering, rule in SPEC_TABLE
        ],
    )


def downgrade() -> None:
    op.execute(
        sa.text("DELETE FROM representation_policy WHERE policy_set = :policy_set").bindparams(
            policy_set=SPEC_POLICY_SET
        )
    )
