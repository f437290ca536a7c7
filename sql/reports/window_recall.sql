-- window_recall: does the window keep what its own pool holds of the needed code? Per
-- decision type, arm, variant and ranker (run.note), over two scopes of gold facts:
-- 'edited code' (the edited_entity facts: the code the patch changes) and 'all facts'
-- (those plus the changed tests and the FAIL_TO_PASS tests). Definitions:
--   an item HOLDS a fact when it is an item of the fact's entity; or of the same file
--     with a line span holding the fact's (an enclosing class, a module's text) — not an
--     outline (a module's 'symbol' item: a skeleton), whose span is the whole file; or
--     of the same file with a text holding the fact's def/class line (a skeleton);
--     (a text holds a line when REPLACE(text, line, '') <> text: exact on both backends);
--   pool_recall     share of the decisions' facts some pool item holds;
--   window_recall   share some window item holds, in any rendering (the window text is
--                   what is searched for the def/class line);
--   changed_recall  share a window item shows the changed lines of, as file lines
--                   (verbatim, or cut or sliced around the change: window_item.shown_*);
--                   a fact with no changed lines (a test, a new file) counts when an
--                   item of its entity is verbatim;
--   recall_ratio    window_recall / pool_recall (the constructor's own loss: 1.0 keeps
--                   everything its pool held);
--   residue_recall  share held by an item the gate left residual (§3.2);
--   residue_median, residue_p95   the candidates per decision the ranking step takes
--                   (a module outline and its file's residual symbols are one; lower
--                   middle; nearest rank), ranked_share  the share of decisions whose ranking step made
--                   its one call (§4: a non-empty residue of at most 32 and an endpoint);
--   median_tokens   window tokens per decision (lower middle).
WITH decisions AS (
    SELECT d.decision_id, d.arm, d.variant, d.instance_id, d.decision_type, d.token_count,
           CASE WHEN d.arm = 'current' THEN 'no call (baseline)'
                WHEN r.note LIKE 'ranker: %' THEN SUBSTR(r.note, 9) ELSE '' END AS ranker,
           (SELECT COUNT(*) FROM item_event ev
            JOIN evidence_item e ON e.decision_id = ev.decision_id AND e.item_id = ev.item_id
            WHERE ev.decision_id = d.decision_id AND ev.stage = 'gate'
              AND ev.action = 'residual'
              -- a symbol whose file's outline is residual too is not a candidate of its
              -- own: the outline stands for it (ctxdb/pipeline/gate.py)
              AND NOT (e.entity_key LIKE '%::%' AND EXISTS (
                  SELECT 1 FROM item_event outline_event
                  JOIN evidence_item outline ON outline.decision_id = outline_event.decision_id
                                            AND outline.item_id = outline_event.item_id
                  WHERE outline_event.decision_id = ev.decision_id
                    AND outline_event.stage = 'gate' AND outline_event.action = 'residual'
                    AND outline.kind = 'symbol' AND outline.entity_key = e.path))
           ) AS residue,
           CASE WHEN EXISTS (SELECT 1 FROM rank_call c WHERE c.decision_id = d.decision_id)
                THEN 1 ELSE 0 END AS ranked
    FROM v_ab_decision d
    JOIN run r ON r.run_id = d.run_id
),
scopes (scope) AS (VALUES ('edited code'), ('all facts')),
facts AS (
    SELECT s.scope, d.decision_id, g.fact_no, g.entity_key, g.path, g.start_line, g.end_line,
           g.changed_start_line, g.changed_end_line, g.head_text
    FROM decisions d
    JOIN gold_fact g ON g.instance_id = d.instance_id
    JOIN scopes s ON s.scope = 'all facts' OR g.fact_kind = 'edited_entity'
),
-- each pool item of a fact's file (or entity) against the fact: whether it holds it by
-- entity or span, whether its content or its window text shows the def/class line, and
-- where it went — the one "holds" rule of the definitions above, written once
item_fact AS (
    SELECT f.decision_id, f.fact_no, e.in_pool,
           CASE WHEN e.entity_key = f.entity_key
                  OR (e.path = f.path AND e.start_line <= f.start_line AND e.end_line >= f.end_line
                      AND (e.kind <> 'symbol' OR e.entity_key LIKE '%::%'))
                THEN 1 ELSE 0 END AS by_span,
           CASE WHEN e.path = f.path AND f.head_text IS NOT NULL
                 AND REPLACE(t.content, f.head_text, '') <> t.content
                THEN 1 ELSE 0 END AS content_shows_line,
           CASE WHEN w.item_id IS NULL THEN 0 ELSE 1 END AS in_window,
           CASE WHEN e.path = f.path AND f.head_text IS NOT NULL
                 AND REPLACE(shown.content, f.head_text, '') <> shown.content
                THEN 1 ELSE 0 END AS window_shows_line,
           CASE WHEN EXISTS (SELECT 1 FROM item_event ev
                             WHERE ev.decision_id = e.decision_id AND ev.item_id = e.item_id
                               AND ev.stage = 'gate' AND ev.action = 'residual')
                THEN 1 ELSE 0 END AS residual
    FROM facts f
    JOIN evidence_item e ON e.decision_id = f.decision_id
                        AND (e.entity_key = f.entity_key OR e.path = f.path)
    JOIN evidence_text t ON t.content_sha256 = e.content_sha256
    LEFT JOIN window_item w ON w.decision_id = e.decision_id AND w.item_id = e.item_id
    LEFT JOIN evidence_text shown ON shown.content_sha256 = w.rendered_sha256
    WHERE f.scope = 'all facts'  -- every fact once: the other scope is a subset
),
holders AS (
    SELECT decision_id, fact_no,
           MAX(CASE WHEN in_pool AND (by_span = 1 OR content_shows_line = 1)
                    THEN 1 ELSE 0 END) AS in_pool,
           MAX(CASE WHEN residual = 1 AND (by_span = 1 OR content_shows_line = 1)
                    THEN 1 ELSE 0 END) AS in_residue,
           MAX(CASE WHEN in_window = 1 AND (by_span = 1 OR window_shows_line = 1)
                    THEN 1 ELSE 0 END) AS in_window
    FROM item_fact
    GROUP BY decision_id, fact_no
),
held AS (
    SELECT f.*,
        COALESCE(h.in_pool, 0) AS in_pool, COALESCE(h.in_residue, 0) AS in_residue,
        COALESCE(h.in_window, 0) AS in_window,
        CASE WHEN EXISTS (
            SELECT 1 FROM window_item w
            JOIN evidence_item e ON e.decision_id = w.decision_id AND e.item_id = w.item_id
            WHERE w.decision_id = f.decision_id
              AND CASE WHEN f.changed_start_line IS NULL
                       THEN e.entity_key = f.entity_key AND w.rendering = 'verbatim'
                       ELSE e.path = f.path AND w.shown_start_line <= f.changed_start_line
                            AND w.shown_end_line >= f.changed_end_line
                  END
        ) THEN 1 ELSE 0 END AS changed_shown
    FROM facts f
    LEFT JOIN holders h ON h.decision_id = f.decision_id AND h.fact_no = f.fact_no
),
by_group AS (
    SELECT d.decision_type, d.arm, d.variant, d.ranker, h.scope,
           COUNT(*) AS facts, SUM(h.in_pool) AS in_pool, SUM(h.in_window) AS in_window,
           SUM(h.changed_shown) AS changed_shown, SUM(h.in_residue) AS in_residue
    FROM held h JOIN decisions d ON d.decision_id = h.decision_id
    GROUP BY d.decision_type, d.arm, d.variant, d.ranker, h.scope
),
ranked_decisions AS (
    SELECT decision_type, arm, variant, ranker, residue, ranked, token_count,
           ROW_NUMBER() OVER (PARTITION BY decision_type, arm, variant, ranker
                              ORDER BY residue) AS residue_no,
           ROW_NUMBER() OVER (PARTITION BY decision_type, arm, variant, ranker
                              ORDER BY token_count) AS tokens_no,
           COUNT(*) OVER (PARTITION BY decision_type, arm, variant, ranker) AS decisions
    FROM decisions
),
per_decision AS (
    SELECT decision_type, arm, variant, ranker, MAX(decisions) AS decisions,
           MIN(CASE WHEN 2 * residue_no >= decisions THEN residue END) AS residue_median,
           MIN(CASE WHEN 100 * residue_no >= 95 * decisions THEN residue END) AS residue_p95,
           AVG(CAST(CASE WHEN ranked = 1 THEN 1 ELSE 0 END AS DOUBLE PRECISION)) AS ranked_share,
           MIN(CASE WHEN 2 * tokens_no >= decisions THEN token_count END) AS median_tokens
    FROM ranked_decisions
    GROUP BY decision_type, arm, variant, ranker
)
SELECT
    g.decision_type, g.arm, g.variant, g.ranker, g.scope, p.decisions, g.facts,
    CAST(g.in_pool AS DOUBLE PRECISION) / g.facts AS pool_recall,
    CAST(g.in_window AS DOUBLE PRECISION) / g.facts AS window_recall,
    CAST(g.changed_shown AS DOUBLE PRECISION) / g.facts AS changed_recall,
    CASE WHEN g.in_pool > 0 THEN CAST(g.in_window AS DOUBLE PRECISION) / g.in_pool END AS recall_ratio,
    CAST(g.in_residue AS DOUBLE PRECISION) / g.facts AS residue_recall,
    p.residue_median, p.residue_p95, p.ranked_share, p.median_tokens
FROM by_group g
JOIN per_decision p
  ON p.decision_type = g.decision_type AND p.arm = g.arm AND p.variant = g.variant
 AND p.ranker = g.ranker
ORDER BY g.decision_type DESC, g.scope DESC, g.arm, g.variant, g.ranker;
