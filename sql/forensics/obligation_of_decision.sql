-- obligation_of_decision: the plan node's obligation and acceptance criteria (the ones
-- the DecisionContext carries) of one decision.
SELECT obligation_text, acceptance_criteria_json
FROM obligation
WHERE decision_id = :decision_id AND source = '07'
ORDER BY obligation_no
LIMIT 1;
