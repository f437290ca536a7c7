"""Replays of recorded agent runs (issue 20): every decision of a run beside what its
harness sent, and what the agent's next action used.

- `replay_run`: one recorded run replayed under a store run (`run_id`, the ctx08 arm's
  decisions): its trajectory, the evaluation's verdict (`resolved`), how many decisions,
  and how faithfully its working tree was rebuilt — `tree_matches_submission` (the
  rebuilt tree's `git add -A && git diff --cached` equals the run's submitted patch),
  `tree_lost_at_seq` (the first decision whose tree is not known to be the run's, NULL
  when none) and `tree_note` (why).
- `replay_decision`: decision `seq` of a run in each arm (`ctx08`: the constructed window,
  with its `decision_id`; `current`: exactly what the harness sent; `mask10`: the same
  with observations older than the 10 newest replaced by a placeholder) — its prompt's
  tokens and how many of them a prompt cache would serve (the prefix it shares with the
  arm's previous decision), the action that followed (`action_kind`), whether the tree is
  the run's (`tree_known`) and whether the ctx08 request was refused (`refused`: its
  prompt is then the harness's own messages alone).
- `replay_anchor`: what action `seq` took from earlier observations (ctxdb.agent.anchors),
  with the newest earlier step whose observation held it (`held_by_seq`).
- `replay_anchor_outcome`: per arm, whether the window kept the anchor, and where a lost
  one went (`fate`: the newest holding observation's final verdict).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

REPLAY_ARMS = "arm IN ('ctx08', 'current', 'mask10')"


def upgrade() -> None:
    op.create_table(
        "replay_run",
        sa.Column("run_id", sa.String(200), sa.ForeignKey("run.run_id"), nullable=False),
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("trajectory", sa.Text, nullable=False),
        sa.Column("trajectory_format", sa.String(40), nullable=False),
        sa.Column("resolved", sa.Boolean),
        sa.Column("decisions", sa.Integer, nullable=False),
        sa.Column("tree_matches_submission", sa.Boolean),
        sa.Column("tree_lost_at_seq", sa.Integer),
        sa.Column("tree_note", sa.Text),
        sa.Column("rerun_seconds", sa.Float),
        sa.Column("replay_seconds", sa.Float),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "instance_id"),
    )
    op.create_table(
        "replay_decision",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("arm", sa.String(20), nullable=False),
        sa.Column("decision_id", sa.Integer, sa.ForeignKey("decision.decision_id")),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("cached_tokens", sa.Integer, nullable=False),
        sa.Column("action_kind", sa.String(20), nullable=False),
        sa.Column("tree_known", sa.Boolean, nullable=False),
        sa.Column("refused", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "instance_id", "seq", "arm"),
        sa.ForeignKeyConstraint(["run_id", "instance_id"],
                                ["replay_run.run_id", "replay_run.instance_id"]),
        sa.CheckConstraint(REPLAY_ARMS, name="ck_replay_decision_arm"),
        sa.CheckConstraint("action_kind IN ('edit', 'other', 'none', 'submit')",
                           name="ck_replay_decision_action_kind"),
        sa.CheckConstraint("cached_tokens >= 0 AND cached_tokens <= prompt_tokens",
                           name="ck_replay_decision_cached_tokens"),
    )
    op.create_table(
        "replay_anchor",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("anchor_no", sa.Integer, nullable=False),
        sa.Column("anchor_class", sa.String(20), nullable=False),
        sa.Column("anchor_text", sa.Text, nullable=False),
        sa.Column("path", sa.Text),
        sa.Column("line", sa.Integer),
        sa.Column("held_by_seq", sa.Integer),
        sa.PrimaryKeyConstraint("run_id", "instance_id", "seq", "anchor_no"),
        sa.ForeignKeyConstraint(["run_id", "instance_id"],
                                ["replay_run.run_id", "replay_run.instance_id"]),
    )
    op.create_table(
        "replay_anchor_outcome",
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("instance_id", sa.String(200), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("anchor_no", sa.Integer, nullable=False),
        sa.Column("arm", sa.String(20), nullable=False),
        sa.Column("kept", sa.Boolean, nullable=False),
        sa.Column("fate", sa.String(20)),
        sa.PrimaryKeyConstraint("run_id", "instance_id", "seq", "anchor_no", "arm"),
        sa.ForeignKeyConstraint(
            ["run_id", "instance_id", "seq", "anchor_no"],
            ["replay_anchor.run_id", "replay_anchor.instance_id", "replay_anchor.seq",
             "replay_anchor.anchor_no"]),
        sa.CheckConstraint(REPLAY_ARMS, name="ck_replay_anchor_outcome_arm"),
    )


def downgrade() -> None:
    for table in ("replay_anchor_outcome", "replay_anchor", "replay_decision", "replay_run"):
        op.drop_table(table)
