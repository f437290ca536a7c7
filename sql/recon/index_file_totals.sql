-- index_file_totals: what one file counts for in index_totals besides its symbols: the
-- edges out of its symbols and whether it is flagged (taken off when it is replaced).
SELECT
    (SELECT count(*) FROM recon.edge e JOIN recon.symbol s ON s.id = e.src_symbol_id
     WHERE s.file_id = :file_id) AS edges,
    (SELECT count(*) FROM recon.file f
     WHERE f.id = :file_id AND (f.syntax_error OR f.not_utf8)) AS flagged;
