-- decision_by_ref: the newest decision whose request hash starts with a prefix
-- (the `req-…` name a masking pointer prints).
SELECT decision_id
FROM decision
WHERE substr(request_sha256, 1, :prefix_length) = :prefix
ORDER BY decision_id DESC
LIMIT 1;
