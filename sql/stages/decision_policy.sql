-- decision_policy: what a decision's gate and rendering read besides its own rows — the
-- sources' priority (§3.1), the link kinds that admit for its decision type (§3.2), the
-- representation table of its policy set (§3.3). A decision decided before the write
-- lock is decided again under it only when these rows changed in between.
SELECT 'source_priority' AS policy, source AS name, CAST(priority AS TEXT) AS value
FROM source_priority
UNION ALL
SELECT 'gate_link_policy', link_kind, ''
FROM gate_link_policy
WHERE decision_type = :decision_type
UNION ALL
SELECT 'representation_policy', role, rendering
FROM representation_policy
WHERE policy_set = :policy_set
ORDER BY 1, 2, 3;
