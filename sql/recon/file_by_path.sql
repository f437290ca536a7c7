-- file_by_path: a recon file's id, content hash, line count and full text.
SELECT f.id, f.path, f.sha256, f.line_count, fs.text
FROM recon.file f
JOIN recon.file_source fs ON fs.file_id = f.id
WHERE f.path = :path;
