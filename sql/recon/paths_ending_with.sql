-- paths_ending_with: recon files whose path is a suffix of a traceback's file name.
SELECT f.path
FROM recon.file f
WHERE f.path = :name OR :name LIKE '%/' || f.path
ORDER BY length(f.path) DESC, f.path;
