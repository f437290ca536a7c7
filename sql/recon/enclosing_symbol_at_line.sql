-- enclosing_symbol_at_line: the innermost symbol (the module included) whose span holds
-- a line of a file — where a traceback frame points.
SELECT s.id, s.name, s.kind
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE f.path = :path AND s.start_line <= :line AND s.end_line >= :line
ORDER BY s.end_line - s.start_line, s.start_line DESC, s.id
LIMIT 1;
