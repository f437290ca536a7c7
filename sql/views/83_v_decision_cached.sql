-- v_decision_cached: per decision, its tokens and those a prompt cache would serve when
-- the decision before it in its run and instance (by seq) was the prompt sent last: an
-- agent loop's steps, live or replayed. Counted by whole window items: everything sent
-- besides the items (the harness's prompt, the task, the chat framing: token_count less
-- the items' tokens) when the task is the same and that is as long as the previous
-- decision's (the harness's prompt is told by its length; or all the previous decision
-- sent, when that was the harness's prompt alone with no window; the harness's prompt
-- alone, the lesser of the two decisions' besides, between a window and a loop step sent
-- as the harness's messages, flag harness_sent_over_ceiling), then each item
-- up to the first whose text (rendered_sha256) differs from the previous window's at the
-- same position. The replay counts the shared start of that item too, and leaves out the
-- framing that follows the shared part (replay_decision.cached_tokens): this counts the
-- reply's priming (3 tokens) as served. first_changed_position is NULL when no item
-- changed or the decision has none. cached_at_marks_tokens: the same for a cache that
-- serves only where an earlier request marked (Anthropic's), the previous decision
-- marked as ctxdb.agent.cache_marks marks a window — after the harness's prompt, before
-- its newest reasoning (else its newest step's items) and at its end — so served
-- up to the last of those marks at or before the first item that changed; marks of
-- decisions before the previous one, and the provider's lookback limit, are not
-- counted (tools/cache_marks.py plays them over a replay), nor a cache write's premium
-- or the cache's lifetime; it is counted whether or not the previous window went marked.
-- cache_marked: 1 when this decision's window went to the model with those marks (flag
-- cache_marked: the mini-swe-agent wrapper's ctx08 windows for a model that marks its
-- prompts, or when asked), else 0. Reading one decision's row works out the whole store's (a window
-- function finds each previous decision): about a second for 4,000 decisions.
CREATE VIEW v_decision_cached AS
WITH ordered AS (
    SELECT d.decision_id, d.run_id, d.instance_id, d.seq, d.token_count, d.task_text,
           -- the flag exactly, on both backends (LIKE would read its _ as any character,
           -- and SQLite's ignores case)
           CASE WHEN REPLACE(',' || d.flags || ',', ',cache_marked,', '')
                     <> ',' || d.flags || ',' THEN 1 ELSE 0 END AS cache_marked,
           -- a loop step whose window could not fit, sent as the harness's messages
           CASE WHEN REPLACE(',' || d.flags || ',', ',harness_sent_over_ceiling,', '')
                     <> ',' || d.flags || ',' THEN 1 ELSE 0 END AS harness_sent,
           LAG(d.decision_id) OVER (PARTITION BY d.run_id, d.instance_id
                                    ORDER BY d.seq, d.decision_id) AS previous_decision_id
    FROM decision d
),
compared AS (  -- each window item beside the previous window's at its position
    SELECT o.decision_id, w.position, w.token_count,
           CASE WHEN b.rendered_sha256 = w.rendered_sha256 THEN 0 ELSE 1 END AS changed
    FROM ordered o
    JOIN window_item w ON w.decision_id = o.decision_id
    LEFT JOIN window_item b ON b.decision_id = o.previous_decision_id
                           AND b.position = w.position
),
by_decision AS (
    SELECT decision_id, SUM(token_count) AS item_tokens,
           MIN(CASE WHEN changed = 1 THEN position END) AS first_changed_position,
           MAX(position) AS last_position
    FROM compared
    GROUP BY decision_id
),
item_step AS (  -- each window item's step and part: item numbers run four to a step,
                -- the reasoning third (an item id is 'E' and its number: ck_evidence_item_id)
    SELECT decision_id, position,
           (CAST(SUBSTR(item_id, 2) AS INTEGER) - 1) / 4 + 1 AS step,
           (CAST(SUBSTR(item_id, 2) AS INTEGER) - 1) % 4 AS part,
           MAX((CAST(SUBSTR(item_id, 2) AS INTEGER) - 1) / 4 + 1)
               OVER (PARTITION BY decision_id) AS newest_step,
           MAX(position) OVER (PARTITION BY decision_id) AS last_position
    FROM window_item
),
middle_mark AS (  -- the position after each window's middle mark (cache_marks.middle_mark):
                  -- its last item when that is the newest reasoning, else where the run of
                  -- its newest step's items at its end starts
    SELECT decision_id,
           CASE WHEN MAX(CASE WHEN position = last_position AND part = 2 THEN 1 ELSE 0 END)
                     = 1 THEN MAX(position)
                ELSE COALESCE(MAX(CASE WHEN step <> newest_step THEN position END), 0) + 1
           END AS position
    FROM item_step
    GROUP BY decision_id
),
bounds AS (  -- the first position each cache does not serve: the first item that changed,
             -- and the last mark the previous window put at or before it
    SELECT o.decision_id, b.first_changed_position,
           -- (nothing changed: the window is the previous one's start, or all of it)
           CASE WHEN pb.last_position + 1 <= COALESCE(b.first_changed_position,
                                                      b.last_position + 1)
                    THEN pb.last_position + 1
                WHEN n.position <= COALESCE(b.first_changed_position, b.last_position + 1)
                    THEN n.position
                ELSE 1
           END AS first_unserved_at_marks
    FROM ordered o
    JOIN by_decision b ON b.decision_id = o.decision_id
    LEFT JOIN by_decision pb ON pb.decision_id = o.previous_decision_id
    LEFT JOIN middle_mark n ON n.decision_id = o.previous_decision_id
),
unchanged AS (  -- the items before each bound
    SELECT c.decision_id,
           SUM(CASE WHEN d.first_changed_position IS NULL
                         OR c.position < d.first_changed_position
                    THEN c.token_count ELSE 0 END) AS unchanged_tokens,
           SUM(CASE WHEN c.position < d.first_unserved_at_marks
                    THEN c.token_count ELSE 0 END) AS unchanged_at_marks_tokens
    FROM compared c
    JOIN bounds d ON d.decision_id = c.decision_id
    GROUP BY c.decision_id
),
served_from AS (  -- what a cache serves first: nothing, the previous prompt whole, or
                  -- all but the window's items and then the items up to a bound
    SELECT o.decision_id, p.token_count AS previous_token_count,
           o.token_count - COALESCE(b.item_tokens, 0) AS besides_items,
           p.token_count - COALESCE(pb.item_tokens, 0) AS previous_besides_items,
           CASE WHEN o.previous_decision_id IS NULL OR o.token_count IS NULL
                     OR p.token_count IS NULL OR o.task_text <> p.task_text THEN 'nothing'
                -- the previous decision sent no window (a loop's first: the harness's
                -- prompt alone): that prompt is served, the window's own framing is new
                WHEN pb.item_tokens IS NULL AND b.item_tokens IS NOT NULL
                     AND p.token_count <= o.token_count - b.item_tokens THEN 'prompt'
                -- a window after the harness's messages sent instead, or those after a
                -- window: the harness's prompt is served, the rest follows it anew
                WHEN o.harness_sent <> po.harness_sent THEN 'prefix'
                WHEN o.token_count - COALESCE(b.item_tokens, 0)
                     <> p.token_count - COALESCE(pb.item_tokens, 0) THEN 'nothing'
                ELSE 'items'
           END AS kind
    FROM ordered o
    LEFT JOIN by_decision b ON b.decision_id = o.decision_id
    LEFT JOIN decision p ON p.decision_id = o.previous_decision_id
    LEFT JOIN ordered po ON po.decision_id = o.previous_decision_id
    LEFT JOIN by_decision pb ON pb.decision_id = o.previous_decision_id
)
SELECT
    o.decision_id,
    o.run_id,
    o.instance_id,
    o.seq,
    o.previous_decision_id,
    o.token_count,
    CASE f.kind WHEN 'nothing' THEN 0 WHEN 'prompt' THEN f.previous_token_count
         WHEN 'prefix' THEN CASE WHEN f.besides_items < f.previous_besides_items
                                 THEN f.besides_items ELSE f.previous_besides_items END
         ELSE f.besides_items + COALESCE(u.unchanged_tokens, 0)
    END AS cached_tokens,
    b.first_changed_position,
    CASE f.kind WHEN 'nothing' THEN 0 WHEN 'prompt' THEN f.previous_token_count
         WHEN 'prefix' THEN CASE WHEN f.besides_items < f.previous_besides_items
                                 THEN f.besides_items ELSE f.previous_besides_items END
         ELSE f.besides_items + COALESCE(u.unchanged_at_marks_tokens, 0)
    END AS cached_at_marks_tokens,
    o.cache_marked
FROM ordered o
JOIN served_from f ON f.decision_id = o.decision_id
LEFT JOIN by_decision b ON b.decision_id = o.decision_id
LEFT JOIN unchanged u ON u.decision_id = o.decision_id;
