-- body_search (SQLite): symbols whose own source text matches ANY of the query's terms
-- (an FTS5 OR query of quoted terms), best BM25 first, ties by symbol id — the body
-- lexical signal of the retriever.
SELECT b.rowid AS symbol_id, bm25(symbol_body_fts) AS score
FROM recon.symbol_body_fts b
WHERE symbol_body_fts MATCH :query
ORDER BY score, symbol_id
LIMIT :limit;
