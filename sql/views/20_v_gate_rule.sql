-- v_gate_rule: the hard relevance gate's rule (spec §3.2), one row per pool item of every
-- decision, before the 64-item cap (v_gate applies the cap; the pipeline runs this view and
-- caps the admitted set — ranked items included — by the same order in gate.py).
-- An item is admitted iff a driver reaches it:
--   obligation-driven  its entity is a structural link of the current obligation
--                      (decision_link, filtered by gate_link_policy for the decision type),
--                      a line span overlapping a linked symbol, the plan node or an
--                      acceptance criterion itself (source 07), a 05 change target, or
--                      live state (patch, errors, tracebacks, tool and test output from
--                      sources live/patch);
--   impact-DAG-driven  its entity is the tail of a DIRECT (depth 1) impact edge whose
--                      head is the change target.
-- Otherwise it is residual when item_nearness scores it near the decision (near_score at
-- least NEAR_MIN_SCORE, ctxdb.pipeline.gate_inputs: 0.0 here too), else rejected.
-- `driver` names the link that decided; `priority` is its source's place in §3.1's order.
-- Filter by decision_id: the view is written so the filter reaches the per-item subqueries.
-- An agent-loop decision has no gate (its parts are placed by the loop's rules, in
-- item_event): this view reads its items as unlinked.
CREATE VIEW v_gate_rule AS
SELECT
    e.decision_id,
    e.item_id,
    e.item_no,
    e.source,
    e.kind,
    e.entity_key,
    e.arrival_no,
    sp.priority,
    CASE
        WHEN NOT e.in_pool THEN 'out_of_pool'
        WHEN e.source = '07' AND e.kind IN ('plan_node', 'acceptance_criteria')
            THEN 'admit'
        WHEN e.source IN ('live', 'patch')
         AND e.kind IN ('patch', 'error', 'traceback', 'tool_output', 'test_output')
            THEN 'admit'
        WHEN obligation_link.link_kind IS NOT NULL THEN 'admit'
        WHEN e.kind IN ('fault_entity', 'changed_entity') AND change_policy.link_kind IS NOT NULL
            THEN 'admit'
        WHEN impact.edge_kind IS NOT NULL THEN 'admit'
        WHEN near.near_score >= 0.0 THEN 'residual'
        ELSE 'reject'
    END AS gate_verdict,
    CASE
        WHEN NOT e.in_pool THEN 'pool_cap_256'
        WHEN e.source = '07' AND e.kind IN ('plan_node', 'acceptance_criteria')
            THEN 'obligation:' || e.kind
        WHEN e.source IN ('live', 'patch')
         AND e.kind IN ('patch', 'error', 'traceback', 'tool_output', 'test_output')
            THEN 'obligation:live_state'
        WHEN obligation_link.link_kind = 'impact_digest' THEN 'impact:transitive_digest'
        WHEN obligation_link.link_kind IS NOT NULL
            THEN 'obligation:' || obligation_link.link_kind
        WHEN e.kind IN ('fault_entity', 'changed_entity') AND change_policy.link_kind IS NOT NULL
            THEN 'obligation:change_target'
        WHEN impact.edge_kind IS NOT NULL THEN 'impact:' || impact.edge_kind
        WHEN near.near_score >= 0.0 THEN
            'near:' || CASE
                WHEN near.recon_hops IS NOT NULL
                    THEN 'recon_hops=' || CAST(near.recon_hops AS TEXT)
                ELSE 'shared_terms=' || near.shared_terms
            END
        WHEN near.item_id IS NOT NULL THEN 'near_score_below_threshold'
        ELSE 'no_structural_link'
    END AS driver
FROM evidence_item e
JOIN decision d ON d.decision_id = e.decision_id
JOIN source_priority sp ON sp.source = e.source
LEFT JOIN gate_link_policy change_policy
    ON change_policy.decision_type = d.decision_type
   AND change_policy.link_kind = 'change_target'
-- the first (lowest link_no) admitting link of the obligation that reaches the item:
-- one naming the item's own entity, or (for a line span) one whose symbol it overlaps
LEFT JOIN decision_link obligation_link
    ON obligation_link.decision_id = e.decision_id
   AND obligation_link.link_no = (
        SELECT MIN(reaching.link_no) FROM (
            SELECT l.link_no
            FROM decision_link l
            JOIN gate_link_policy p
                ON p.decision_type = d.decision_type AND p.link_kind = l.link_kind
            WHERE l.decision_id = e.decision_id AND l.entity_key = e.entity_key
            UNION ALL
            SELECT l.link_no
            FROM decision_link l
            JOIN gate_link_policy p
                ON p.decision_type = d.decision_type AND p.link_kind = l.link_kind
            WHERE e.entity_key NOT LIKE '%::%'
              AND e.start_line IS NOT NULL
              AND e.entity_key <> e.path
              AND l.decision_id = e.decision_id
              AND l.path = e.path
              AND l.start_line IS NOT NULL
              AND e.start_line <= l.end_line AND l.start_line <= e.end_line
        ) reaching
   )
-- the first direct impact edge from a change target to the item (the edges into the item
-- looked up first, the head's link only for those: most items have none)
LEFT JOIN impact_edge impact
    ON impact.decision_id = e.decision_id
   AND impact.edge_no = (
        SELECT MIN(ie.edge_no)
        FROM impact_edge ie
        WHERE ie.decision_id = e.decision_id
          AND ie.depth = 1
          AND ie.tail_entity = e.entity_key
          AND EXISTS (
              SELECT 1
              FROM decision_link head
              JOIN gate_link_policy head_policy
                  ON head_policy.decision_type = d.decision_type
                 AND head_policy.link_kind = head.link_kind
              WHERE head.decision_id = ie.decision_id
                AND head.entity_key = ie.head_entity
                AND head.link_kind IN ('target_entity', 'change_target')
          )
   )
LEFT JOIN item_nearness near
    ON near.decision_id = e.decision_id AND near.item_id = e.item_id;
