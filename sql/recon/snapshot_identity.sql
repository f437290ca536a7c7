-- snapshot_identity: what names one state of the recon index for readers that keep what
-- they read: the generation (new on every index run that changes anything; NULL for an
-- index written before generations), the highest file id and the file count (which move
-- when an indexer that predates generations changes the index).
SELECT
    (SELECT m.value FROM recon.recon_meta m WHERE m.key = :generation_key) AS generation,
    (SELECT MAX(f.id) FROM recon.file f) AS highest_file_id,
    (SELECT COUNT(*) FROM recon.file f) AS file_count;
