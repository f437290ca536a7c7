-- paths_ending_with: recon files whose path is the traceback file name or a suffix of it
-- after a '/'. substr, not LIKE: '_' and '%' in paths are not wildcards, and the match is
-- case-sensitive on both backends.
SELECT f.path
FROM recon.file f
WHERE f.path = :name
   OR (length(:name) > length(f.path)
       AND substr(:name, length(:name) - length(f.path)) = '/' || f.path)
ORDER BY length(f.path) DESC, f.path;
