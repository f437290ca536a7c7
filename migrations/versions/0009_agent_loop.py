"""Agent-loop windows (issue 22).

- `evidence_item.kind` also takes what an agent loop's history holds: `agent_turn` (the
  agent's own command), `file_view` (a folded output that printed files, shown as the
  lines it printed, read from the tree) and `harness_note` (the harness's own feedback:
  a format error, a timeout note).
- `replay_decision.arm` and `replay_anchor_outcome.arm` also take `ctx08-without-<rule>`:
  the loop window with one of its rules off, the replay's ablation rows (40 characters,
  was 20).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# spec.py's closed enums as they stand at this revision (a migration does not follow
# later edits of the code)
KINDS_0005 = ("source_code", "symbol", "retrieved_hit", "fault_entity", "changed_entity",
              "graph_edge", "config", "downstream_obligation", "plan_node",
              "acceptance_criteria", "patch", "error", "traceback", "tool_output",
              "test_output")
LOOP_KINDS = ("agent_turn", "file_view", "harness_note")
ARMS_0008 = "arm IN ('ctx08', 'current', 'mask10')"
ARMS_0009 = ARMS_0008 + " OR arm LIKE 'ctx08-without-%'"
REPLAY_ARM_CHECKS = (("replay_decision", "ck_replay_decision_arm"),
                     ("replay_anchor_outcome", "ck_replay_anchor_outcome_arm"))


def _any_of(column: str, values) -> str:
    return " OR ".join(f"{column} = '{value}'" for value in values)


ARM_CHARS_0008, ARM_CHARS_0009 = 20, 40


def _set_checks(kinds, arms: str, arm_chars: int) -> None:
    with op.batch_alter_table("evidence_item") as batch:
        batch.drop_constraint("ck_evidence_kind", type_="check")
        batch.create_check_constraint("ck_evidence_kind", _any_of("kind", kinds))
    for table, name in REPLAY_ARM_CHECKS:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(name, type_="check")
            batch.alter_column("arm", type_=sa.String(arm_chars))
            batch.create_check_constraint(name, arms)


def upgrade() -> None:
    _set_checks(KINDS_0005 + LOOP_KINDS, ARMS_0009, ARM_CHARS_0009)


def downgrade() -> None:
    # 0008 cannot hold an agent loop's parts or the ablation arms: refuse rather than
    # delete what the store recorded
    connection = op.get_bind()
    held = connection.execute(sa.text(
        "SELECT (SELECT COUNT(*) FROM evidence_item WHERE " + _any_of("kind", LOOP_KINDS) + ")"
        " + (SELECT COUNT(*) FROM replay_decision WHERE arm LIKE 'ctx08-without-%')"
        " + (SELECT COUNT(*) FROM replay_anchor_outcome WHERE arm LIKE 'ctx08-without-%')"
    )).scalar_one()
    if held:
        raise RuntimeError(f"downgrade to 0008: {held} rows of agent-loop decisions or "
                           "ablation arms would not fit its checks; remove them first")
    _set_checks(KINDS_0005, ARMS_0008, ARM_CHARS_0008)
