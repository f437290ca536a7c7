"""The pipeline's words, named once: stages, verdicts, drivers and roles.

These strings are what the audit tables hold (``item_event.stage``, ``.action``,
``.driver``; ``window_item.role``) and what the SQL views emit, so an analyst reads the
same words in a ``sqlite3`` shell as a reader of the code. Where SQL or a migration must
spell one out, ``tests/test_contract.py`` holds the two equal.
"""

from __future__ import annotations

# spec §5's stages, as item_event.stage
ASSEMBLE = "assemble"
GATE = "gate"
RANK = "rank"  # the one learned step (L), and the fold rule that stands in for it
RENDER = "render"
COMPRESS = "compress"
DEDUP = "dedup"
ORDER = "order"
BUDGET = "budget"
STAGES = (ASSEMBLE, GATE, RANK, RENDER, COMPRESS, DEDUP, ORDER, BUDGET)

# v_gate_rule.gate_verdict
ADMIT, RESIDUAL, REJECT, OUT_OF_POOL = "admit", "residual", "reject", "out_of_pool"
GATE_VERDICTS = (ADMIT, RESIDUAL, REJECT, OUT_OF_POOL)

# An item's one final verdict (item_event.action where is_final)
IN_WINDOW, REJECTED, DEDUPED, MASKED, EVICTED, FOLDED = (
    "in_window", "rejected", "deduped", "masked", "evicted", "folded")
FINAL_VERDICTS = (IN_WINDOW, REJECTED, DEDUPED, MASKED, EVICTED, FOLDED)

# an agent-loop decision whose harness prompt carries the task (decision.flags): the
# window does not repeat it (ctxdb.agent.adapter)
TASK_IN_PREFIX_FLAG = "task_in_prefix"
# an agent-loop window sent with cache marks (ctxdb.agent.cache_marks): what the model got
# is the window as marked blocks (decision.flags; forensics.messages_sent gives them back)
CACHE_MARKED_FLAG = "cache_marked"
# an agent-loop step whose ctx08 window could not fit the ceiling, recorded as the
# harness's own messages it sent instead (decision.flags): not a window ctxdb emitted, so
# not held to the ceiling (sql/checks/window_over_ceiling.sql), but counted as sent
HARNESS_SENT_OVER_CEILING_FLAG = "harness_sent_over_ceiling"
# an agent-loop ctx08 window built without the working tree (construct_step's tree None):
# no output could fold to the lines it printed, so each is a pointer (decision.flags)
TREE_NOT_GIVEN_FLAG = "tree_not_given"

# Drivers: what admitted an item, as prefix + link kind / edge kind
OBLIGATION = "obligation:"  # a structural link of the current obligation (v_gate_rule)
IMPACT = "impact:"  # a direct impact edge from the change target (v_gate_rule)
FOLD = "fold:"  # folded into an obligation bucket (§4's rule for a residue the step may not rank)
RANKED = "rank:"  # admitted by the ranking call's score
RANK_ADMITTED = RANKED + "admitted"
OUTLINE_OF_FOLDED_IN = FOLD + "outline_of_folded_in"  # a file's outline follows its code
BASELINE_DRIVER = "baseline:no_gate"  # the `current` arm admits everything

# Structural link kinds (decision_link.link_kind; gate_link_policy's rows)
TARGET_ENTITY = "target_entity"
CHANGE_TARGET = "change_target"
INSERTION_POINT = "insertion_point"
VALIDATION_TEST = "validation_test"
VALIDATION_CALLEE = "validation_callee"
TRACEBACK_FRAME = "traceback_frame"
NAMED_IN_CRITERIA = "named_in_criteria"
IMPACT_DIGEST = "impact_digest"
OBLIGATION_DEPENDENCY = "obligation_dependency"
LINK_KINDS = (TARGET_ENTITY, CHANGE_TARGET, INSERTION_POINT, VALIDATION_TEST,
              VALIDATION_CALLEE, TRACEBACK_FRAME, NAMED_IN_CRITERIA, IMPACT_DIGEST,
              OBLIGATION_DEPENDENCY)
CHANGE_TARGET_LINKS = (TARGET_ENTITY, CHANGE_TARGET)  # the heads of derived impact

# Roles (§3.3), strongest first: which one survives when two items state the same
# fact (§3.5), and which supporting item the budget evicts first (the weakest).
ROLE_STRENGTH = (
    "change_target",
    "insertion_point",
    "requirement",
    "test_reasoned_over",
    "live_current",
    "direct_impact",
    "config_consumer",
    "related_symbol",
    "test_named",
    "transitive_impact",
    "stale",
)
# Roles the §3.6 placement rule calls decision-critical: pinned to the edges.
EDGE_CRITICAL_ROLES = frozenset(
    {"requirement", "change_target", "insertion_point", "test_reasoned_over", "live_current"}
)
STABLE_CORE_ROLES = frozenset({"requirement"})  # §3.7: never evicted

# Evidence kinds by what the stages do with them
TRANSIENT_KINDS = frozenset({"patch", "error", "traceback", "tool_output", "test_output"})
FAILURE_KINDS = frozenset({"error", "traceback", "test_output"})
REQUIREMENT_KINDS = frozenset({"plan_node", "acceptance_criteria"})
CHANGE_TARGET_KINDS = frozenset({"fault_entity", "changed_entity"})
# code whose fact is the symbol it names (dedup, §3.5 classes 1 and 3)
SYMBOL_FACT_KINDS = frozenset({"source_code", "symbol", "retrieved_hit", "fault_entity",
                               "changed_entity", "graph_edge", "downstream_obligation"})
# code an obligation link could have reached: what nearness is judged for (the change
# targets are linked already)
NEAR_TESTED_KINDS = frozenset({"source_code", "symbol", "retrieved_hit", "config", "graph_edge",
                               "downstream_obligation"})
# code read from recon whose lines are file lines: cut around the edit site at the 8 KB cap
SPAN_CUT_KINDS = frozenset({"source_code", "symbol", "retrieved_hit", "fault_entity",
                            "changed_entity", "config", "downstream_obligation"})

# context flag, one per item whose entity recon could not give: unresolved_entity:E4
UNRESOLVED_ENTITY_FLAG = "unresolved_entity"
SPEC_POLICY_SET = "spec"  # the representation_policy rows of the spec (§3.3)
# context flag: the window's token count is an upper bound, not the exact count (it holds
# a run so long that it was counted in slices: ctxdb.tokens.bounded_count)
TOKENS_BOUNDED_FLAG = "token_count_bounded"

# The role each driver gives an admitted item (render.derive_role); a driver the gate
# view can emit that is missing here is a contract failure (tests/test_contract.py).
DRIVER_ROLES = {
    OBLIGATION + "plan_node": "requirement",
    OBLIGATION + "acceptance_criteria": "requirement",
    OBLIGATION + "live_state": "live_current",
    OBLIGATION + TARGET_ENTITY: "change_target",
    OBLIGATION + CHANGE_TARGET: "change_target",
    OBLIGATION + INSERTION_POINT: "insertion_point",
    OBLIGATION + VALIDATION_TEST: "test_reasoned_over",
    OBLIGATION + VALIDATION_CALLEE: "related_symbol",
    OBLIGATION + TRACEBACK_FRAME: "related_symbol",
    OBLIGATION + NAMED_IN_CRITERIA: "related_symbol",
    # §3.3: a related symbol (signature) — unless 05 also names it as changed, when its
    # change_target link comes first and it renders as code being edited
    OBLIGATION + OBLIGATION_DEPENDENCY: "related_symbol",
    IMPACT + "CalledBy": "direct_impact",
    IMPACT + "PreserveObligation": "direct_impact",
    IMPACT + "ConfigConsumer": "config_consumer",
    IMPACT + "SchemaConsumer": "config_consumer",
    IMPACT + "transitive_digest": "transitive_impact",
    RANK_ADMITTED: "related_symbol",
    OUTLINE_OF_FOLDED_IN: "related_symbol",
    **{FOLD + kind: "related_symbol" for kind in LINK_KINDS if kind != IMPACT_DIGEST},
}
