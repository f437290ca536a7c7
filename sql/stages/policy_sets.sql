-- policy_sets: the representation-policy row sets this store holds (spec, ablations).
SELECT DISTINCT policy_set FROM representation_policy ORDER BY policy_set;
