-- fts_any_terms (PostgreSQL): symbols matching ANY of the query's terms, best rank first.
SELECT s.key, s.kind, s.signature, s.doc,
       -ts_rank(s.fts, to_tsquery('simple', :query)) AS score
FROM recon.symbol s
WHERE s.fts @@ to_tsquery('simple', :query)
ORDER BY score, s.key
LIMIT :limit;
