-- index_resolver_files: what name resolution needs of each file, in id order.
SELECT f.id, f.path, f.module, f.is_test
FROM recon.file f
ORDER BY f.id;
