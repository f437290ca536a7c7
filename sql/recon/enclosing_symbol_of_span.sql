-- enclosing_symbol_of_span: the smallest class/function/method whose span holds lines
-- FIRST..LAST (a changed range, or the two lines around a pure insertion).
SELECT s.id, s.key, s.kind, s.name, f.path, s.start_line, s.end_line
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE f.path = :path
  AND s.kind <> 'module'
  AND s.start_line <= :first_line AND s.end_line >= :last_line
ORDER BY s.end_line - s.start_line, s.start_line DESC, s.key
LIMIT 1;
