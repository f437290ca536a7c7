-- index_totals: what IndexStats reports of the whole index: its symbols, its edges and its
-- flagged files (syntax errors, not UTF-8).
SELECT
    (SELECT count(*) FROM recon.symbol) AS symbols,
    (SELECT count(*) FROM recon.edge) AS edges,
    (SELECT count(*) FROM recon.file f WHERE f.syntax_error OR f.not_utf8) AS flagged;
