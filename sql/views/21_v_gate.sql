-- v_gate: the gate with its 64-item cap (spec §3.2), one row per pool item of every
-- decision: v_gate_rule's verdicts, with admitted items past the 64th (ranked by
-- source_priority, then pool order; live state newest first) rejected. `admit_rank` is
-- an admitted item's place under the cap. Filter by decision_id.
CREATE VIEW v_gate AS
SELECT
    ranked.decision_id,
    ranked.item_id,
    ranked.item_no,
    ranked.source,
    ranked.kind,
    ranked.entity_key,
    CASE
        WHEN ranked.gate_verdict = 'admit' AND ranked.admit_rank > 64 THEN 'reject'
        ELSE ranked.gate_verdict
    END AS gate_verdict,
    CASE
        WHEN ranked.gate_verdict = 'admit' AND ranked.admit_rank > 64
            THEN 'admitted_cap_64: lower source priority than 64 admitted items'
        ELSE ranked.driver
    END AS driver,
    ranked.admit_rank
FROM (
    SELECT
        r.*,
        CASE WHEN r.gate_verdict = 'admit' THEN
            ROW_NUMBER() OVER (
                PARTITION BY r.decision_id, r.gate_verdict
                -- live state keeps its newest items first (highest arrival number)
                ORDER BY r.priority,
                         CASE WHEN r.arrival_no IS NULL THEN r.item_no
                              ELSE -r.arrival_no END
            )
        END AS admit_rank
    FROM v_gate_rule r
) ranked;
