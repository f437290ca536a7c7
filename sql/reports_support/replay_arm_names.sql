-- replay_arm_names: the arms the store's replays were measured in (ctx08, current, mask10
-- and each ctx08-without-RULE), to check a `ctxdb report --arms` list against.
SELECT DISTINCT arm
FROM replay_decision
ORDER BY arm;
