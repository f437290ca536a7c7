-- body_search (PostgreSQL): symbols whose own source text matches ANY of the query's
-- terms (a tsquery literal 'a' | 'b'), best rank first (ts_rank, normalised by
-- 1 + log(length) so long bodies do not win by size alone), ties by symbol id.
SELECT b.symbol_id, -ts_rank(b.terms, CAST(:query AS tsquery), 1) AS score
FROM recon.symbol_body b
WHERE b.terms @@ CAST(:query AS tsquery)
ORDER BY score, b.symbol_id
LIMIT :limit;
