-- callees_with_callers: what a set of symbols calls (resolved calls edges), each callee
-- with how many calls edges reach it in all — the retriever's calls signal discounts a
-- helper called from everywhere.
WITH callees AS (
    SELECT DISTINCT e.src_symbol_id AS caller_id, e.dst_symbol_id AS callee_id
    FROM recon.edge e
    WHERE e.src_symbol_id IN :symbol_ids AND e.dst_symbol_id IS NOT NULL
      AND e.kind = 'calls'
)
SELECT c.caller_id, c.callee_id,
       (SELECT COUNT(*) FROM recon.edge all_calls
        WHERE all_calls.kind = 'calls' AND all_calls.dst_symbol_id = c.callee_id) AS callers
FROM callees c
ORDER BY c.caller_id, c.callee_id;
