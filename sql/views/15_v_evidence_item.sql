-- v_evidence_item: the pool with its texts — evidence_item joined to evidence_text,
-- where each distinct text is stored once by its sha256. `content` is what the pipeline
-- saw (cut at 8 KB, marked); `original_content` the uncut text of an item that was cut.
CREATE VIEW v_evidence_item AS
SELECT
    e.decision_id,
    e.item_id,
    e.item_no,
    e.source,
    e.kind,
    e.entity_key,
    t.content,
    e.content_sha256,
    o.content AS original_content,
    e.provenance,
    e.score,
    e.arrival_no,
    e.path,
    e.start_line,
    e.end_line,
    e.signature,
    e.in_pool,
    e.fact_key,
    e.original_sha256
FROM evidence_item e
JOIN evidence_text t ON t.content_sha256 = e.content_sha256
LEFT JOIN evidence_text o ON o.content_sha256 = e.original_sha256;
