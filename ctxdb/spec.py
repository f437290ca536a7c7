"""The build spec's fixed numbers and closed enums (seeds/000, Build Spec 08).

Numbers that the spec says are configurable only through the build's config file
(TOKEN_CEILING, RANK_THRESHOLD) live in ``defaults.toml`` and are read by
``ctxdb.config``; everything here is a contract constant.
"""

# §3.1 evidence-pool caps
POOL_MAX_ITEMS = 256
CONTENT_MAX_BYTES = 8 * 1024
PROVENANCE_MAX_CHARS = 200

# §3.2 gate cap
ADMITTED_MAX = 64

# §3.4 an item that cannot go under this while keeping its predicate is flagged
COMPRESSED_TARGET_BYTES = 1024

# §4 the one L step
RESIDUE_MAX = 32
RANK_MAX_COMPLETION_TOKENS = 1024
RANK_TEMPERATURE = 0

# §3.1 closed enums
EVIDENCE_KINDS = (
    "source_code",
    "symbol",
    "retrieved_hit",
    "fault_entity",
    "changed_entity",
    "graph_edge",
    "config",
    "downstream_obligation",
    "plan_node",
    "acceptance_criteria",
    "patch",
    "error",
    "traceback",
    "tool_output",
    "test_output",
)
EVIDENCE_SOURCES = ("03", "04", "05", "06", "07", "patch", "live")
# What an agent loop's history adds (issue 22): the agent's own turn, a folded file view,
# the harness's own feedback (a format error, a timeout note). Stored, never requested.
LOOP_EVIDENCE_KINDS = ("agent_turn", "file_view", "harness_note")
STORED_EVIDENCE_KINDS = EVIDENCE_KINDS + LOOP_EVIDENCE_KINDS

# §3.1 "07 plan obligations first, 06 impact edges next, 04 hits next, 03 recon
# next, live state next". 05 (localization) and the patch are the change target
# and the current state: ranked with 07 and live respectively.
SOURCE_PRIORITY = {"07": 0, "05": 0, "06": 1, "04": 2, "03": 3, "live": 4, "patch": 4}

# §3.2 impact DAG edge kinds (06)
IMPACT_EDGE_KINDS = ("CalledBy", "ConfigConsumer", "SchemaConsumer", "PreserveObligation")

# §3.3 renderings
RENDERINGS = ("verbatim", "signature", "digest", "truncated", "omitted")

# the decision types a harness asks about (docs/request.md)
DECISION_TYPES = ("localize", "edit", "repair", "other")

# §8: the A/B arms: the constructor, and "stuff everything"
ARM_CTX08, ARM_CURRENT = "ctx08", "current"
ARMS = (ARM_CTX08, ARM_CURRENT)

# §3.7 tiers
TIERS = ("stable_core", "working_set", "transient")

# §3.6 the window's blocks: critical content at the edges
BLOCKS = ("front", "middle", "back")
