-- dependents_of: what depends directly on a set of symbols — callers (calls), tests that
-- exercise them (tests) and subclasses (inherits) — the recon stand-in for 06's DAG.
SELECT DISTINCT e.kind, e.dst_symbol_id AS head_id, src.id AS tail_id, src.key AS tail_key,
       f.is_test AS tail_is_test
FROM recon.edge e
JOIN recon.symbol src ON src.id = e.src_symbol_id
JOIN recon.file f ON f.id = src.file_id
WHERE e.dst_symbol_id IN :symbol_ids
  AND e.kind IN ('calls', 'tests', 'inherits')
ORDER BY e.kind, src.key;
