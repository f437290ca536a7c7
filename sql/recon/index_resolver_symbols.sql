-- index_resolver_symbols: what name resolution needs of each symbol, in id order.
SELECT s.id, s.file_id, s.parent_id, s.kind, s.name
FROM recon.symbol s
ORDER BY s.id;
