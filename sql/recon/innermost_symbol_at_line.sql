-- innermost_symbol_at_line: the smallest class/function/method whose span holds a line.
SELECT s.id, s.key, f.path, s.start_line, s.end_line
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE f.path = :path
  AND s.kind <> 'module'
  AND s.start_line <= :line AND s.end_line >= :line
ORDER BY s.end_line - s.start_line, s.start_line DESC, s.key
LIMIT 1;
