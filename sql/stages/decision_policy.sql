-- decision_policy: what a decision's gate and rendering read besides its own rows — the
-- representation policy set it uses (the request's variant when the store holds rows
-- for it, else the spec's set), the sources' priority (§3.1), the link kinds that admit for
-- its decision type (§3.2), the representation table of that policy set (§3.3). A
-- decision decided before the write lock is decided again under it only when these
-- rows changed in between. One statement: the preview reads it once, and the write once
-- more unless the store shows no other connection's commit since (SQLite's data_version).
-- In no order: the pipeline sorts the rows (SQLite's sort of each part cost ~40% of the
-- statement).
WITH chosen (policy_set) AS (
    SELECT COALESCE(
        (SELECT policy_set FROM representation_policy WHERE policy_set = :variant LIMIT 1),
        :spec_set)
)
SELECT 'policy_set' AS policy, policy_set AS name, '' AS value
FROM chosen
UNION ALL
SELECT 'source_priority', source, CAST(priority AS TEXT)
FROM source_priority
UNION ALL
SELECT 'gate_link_policy', link_kind, ''
FROM gate_link_policy
WHERE decision_type = :decision_type
UNION ALL
SELECT 'representation_policy', r.role, r.rendering
FROM representation_policy r
JOIN chosen c ON c.policy_set = r.policy_set;
