-- nearness_of_decision: why each near item of one decision is near, and the obligation
-- bucket (decision_link) it is nearest to — what §4 ranks or folds once the gate has
-- called it residual.
SELECT n.item_id, n.recon_hops, n.shared_terms, n.nearest_link_no,
       l.link_kind AS nearest_link_kind, l.entity_key AS nearest_entity
FROM item_nearness n
LEFT JOIN decision_link l ON l.decision_id = n.decision_id AND l.link_no = n.nearest_link_no
WHERE n.decision_id = :decision_id;
