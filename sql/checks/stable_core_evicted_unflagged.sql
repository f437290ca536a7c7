-- stable_core_evicted_unflagged: the plan obligation (stable core, §3.7) left out of a
-- constructed window without the decision being flagged stable_core_only /
-- stable_core_truncated (other flags, e.g. nul_replaced, do not excuse it).
SELECT e.decision_id, e.item_id, f.action, f.driver, d.flags
FROM evidence_item e
JOIN decision d ON d.decision_id = e.decision_id
JOIN run r ON r.run_id = d.run_id
JOIN item_event f ON f.decision_id = e.decision_id AND f.item_id = e.item_id AND f.is_final
WHERE r.arm = 'ctx08' AND e.kind = 'plan_node' AND e.source = '07'
  AND f.action <> 'in_window'
  AND d.flags NOT LIKE '%stable_core%'
ORDER BY e.decision_id;
