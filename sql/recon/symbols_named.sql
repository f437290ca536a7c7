-- symbols_named: non-module symbols an identifier names — `name` matches the symbol's
-- own name, and for a dotted identifier (`Cart.total`) also its qualified name. Filtering
-- on the last part first lets the name index do the work.
SELECT s.id, s.key, f.path, s.start_line, s.end_line
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE s.kind <> 'module'
  AND s.name = :last_part
  AND (s.qualname = :name OR :name = :last_part)
ORDER BY s.key;
