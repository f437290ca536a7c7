-- symbols_named_in_file: a file's non-module symbols with one name (a traceback frame's
-- function, when the frame's line falls elsewhere in this version of the file), the one
-- nearest the frame's line first.
SELECT s.id
FROM recon.symbol s
JOIN recon.file f ON f.id = s.file_id
WHERE f.path = :path AND s.name = :name AND s.kind <> 'module'
ORDER BY abs(s.start_line - :line), s.id;
