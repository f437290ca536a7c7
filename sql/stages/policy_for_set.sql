-- policy_for_set: the representation table (§3.3) of one policy set, role → rendering.
SELECT role, rendering
FROM representation_policy
WHERE policy_set = :policy_set
ORDER BY role;
