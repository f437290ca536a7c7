-- index_next_ids: the first free file, symbol and edge ids (new rows take ids above all).
SELECT
    (SELECT coalesce(max(f.id), 0) + 1 FROM recon.file f) AS next_file,
    (SELECT coalesce(max(s.id), 0) + 1 FROM recon.symbol s) AS next_symbol,
    (SELECT coalesce(max(e.id), 0) + 1 FROM recon.edge e) AS next_edge;
