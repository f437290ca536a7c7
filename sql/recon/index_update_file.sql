-- index_update_file: a re-parsed file's row, kept with its id (its unchanged symbols keep
-- theirs).
UPDATE recon.file
SET module = :module, sha256 = :sha256, size_bytes = :size_bytes, line_count = :line_count,
    is_test = :is_test, syntax_error = :syntax_error, not_utf8 = :not_utf8, skipped = :skipped
WHERE id = :id;
