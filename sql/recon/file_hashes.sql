-- file_hashes: content hashes of recon files, to reuse texts already read this process.
SELECT f.path, f.sha256
FROM recon.file f
WHERE f.path IN :paths;
