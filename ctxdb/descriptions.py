"""What each table and column of the store means, in words, written once.

Two generators read this module: ``ctxdb db schema-docs`` (``docs/schema.md``) and
``ctxdb datasette-metadata`` (Datasette's table and column descriptions). The tables and
columns themselves are ``ctxdb/models.py``'s; ``tests/test_analyst.py`` holds the two
together (every table and column described, nothing described that is not there), so a
column added to the models without words here fails a test. A view is described by the
leading comment of its file in ``sql/views/``, its columns here (``VIEW_COLUMNS``).

Kept apart from ``models.py`` (rather than as ``Column(comment=...)``) so the schema that
autogenerate compares stays exactly what the migrations made: PostgreSQL would store a
comment, and a migration would have to carry every word.
"""

from __future__ import annotations

# table -> (what one row is, {column: what it holds})
TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "run": (
        "One A/B run: which arm and variant its decisions were built with.",
        {
            "run_id": "The run's name, as the request's run_id gave it (the A/B runner "
                      "names them PREFIX/ARM/VARIANT).",
            "arm": "ctx08 (the constructor) or current (the stuff-everything baseline, §7).",
            "variant": "The ctx08 variant: default, or an ablation (§7.5) such as "
                       "no_retrieved_code or the litm_buried probe (§7.6).",
            "created_at": "When the run's first decision was recorded (UTC, ISO 8601).",
            "settings_json": "The settings the run was built with, as JSON, and the version "
                             "of ctxdb that built it (ctxdb_version).",
            "note": "Free text; the A/B runner writes 'ranker: none|oracle|URL'.",
        },
    ),
    "decision": (
        "One construction: a decision request and the window built for it.",
        {
            "decision_id": "The decision's number in this store (not stable across stores: "
                           "select by run, instance and seq, or by req-HASH).",
            "run_id": "The run it belongs to (run.run_id).",
            "instance_id": "The task instance the harness is working on.",
            "seq": "The decision's place in the instance's sequence of decisions (from 1).",
            "decision_type": "localize, edit, repair or other.",
            "task_text": "The task as given, uncut (a window flagged task_truncated showed "
                         "less: `ctxdb show` replays the cut).",
            "decision_question": "What the model is asked at this decision, if given.",
            "request_json": "The request exactly as given: nothing the harness sent is lost. "
                            "An agent-loop request names the harness's prompt and its steps "
                            "by digest (prefix_sha256, steps_sha256: each message's and "
                            "step's JSON an evidence_text row, stored once per run), and a "
                            "live current-arm decision (or a ctx08 step flagged "
                            "harness_sent_over_ceiling) the messages "
                            "the harness sent (sent_sha256: each message's role, content "
                            "and tool calls' text likewise); store.request_as_given "
                            "reassembles it.",
            "request_sha256": "sha256 of request_json; `req-<first hex digits>` names the "
                              "decision in masking pointers.",
            "tokenizer": "The tokenizer that counted the window (cl100k_base or deepseek-v4).",
            "token_ceiling": "The hard ceiling of the window in tokens (§3.7 TOKEN_CEILING).",
            "token_count": "Tokens of the window as sent, the sum of its parts' counts: exact, "
                           "or over it where a part holds a long unbroken run "
                           "(ctxdb.tokens.bounded_count); NULL while unfinished.",
            "flags": "Comma-separated flags: task_truncated, stable_core_only, nul_replaced, "
                     "residue_folded_no_ranker, unresolved_entity:E4, fold_waited:20 (an "
                     "agent-loop window whose stride fold waited: its outputs up to step 20 "
                     "folded, as in the window before it), task_in_prefix (an agent-loop "
                     "window whose harness prompt holds the task: not sent twice), "
                     "cache_marked (an agent-loop window sent as blocks with cache marks, "
                     "ctxdb.agent.cache_marks), harness_sent_over_ceiling (an agent-loop "
                     "step whose window could not fit the ceiling, recorded as the "
                     "harness's own messages it sent instead), tree_not_given (an agent-loop "
                     "ctx08 window built without the working tree: every folded output a "
                     "pointer, no view), token_count_bounded (the "
                     "window's token_count is an upper bound: a part holds a long unbroken "
                     "run, ctxdb.tokens.bounded_count), text_replaced, ...",
            "created_at": "When the decision was constructed (UTC, ISO 8601).",
        },
    ),
    "obligation": (
        "The plan node of a decision (source 07): the obligation the window must serve.",
        {
            "decision_id": "The decision (decision.decision_id).",
            "obligation_no": "Its number within the decision (from 1).",
            "source": "07 for the plan node, 06 for a downstream obligation.",
            "node_id": "The plan node's id in the harness's plan.",
            "obligation_text": "What must be done, as the plan states it.",
            "target_entity": "The entity the obligation changes (path::Qualified.name).",
            "preconditions_json": "The node's preconditions, a JSON list.",
            "dependencies_json": "Entities the obligation depends on, a JSON list.",
            "required_validation_json": "Tests that must pass, a JSON list of test ids.",
            "acceptance_criteria_json": "The acceptance criteria, a JSON list of texts.",
            "insertion_path": "The file of the edit site, if given.",
            "insertion_line": "The edit site's first line.",
            "insertion_end_line": "The edit site's last line.",
        },
    ),
    "impact_edge": (
        "An edge of the impact DAG (source 06, or derived from recon): what one edit "
        "affects.",
        {
            "decision_id": "The decision (decision.decision_id).",
            "edge_no": "Its number within the decision.",
            "head_entity": "The entity being changed.",
            "tail_entity": "The entity the change reaches.",
            "edge_kind": "CalledBy, ConfigConsumer, SchemaConsumer or PreserveObligation.",
            "depth": "Hops from the change (1 = direct: only direct edges admit, §3.2).",
            "origin": "06 when the harness gave it, recon when ctxdb derived it.",
        },
    ),
    "evidence_text": (
        "Each distinct text once, by sha256: a symbol asked about in many decisions "
        "is stored once, and so is a window item's text that windows repeat "
        "(window_item.rendered_sha256); also each message of an agent loop's harness "
        "prompt, each step of its history, and each message a live current-arm decision "
        "recorded as sent, as JSON, which its "
        "decisions' request_json names (prefix_sha256, steps_sha256, sent_sha256).",
        {
            "content_sha256": "sha256 of the text's UTF-8.",
            "content": "The text.",
        },
    ),
    "evidence_item": (
        "One pool item of a decision (E1, E2, ...): everything the harness offered, "
        "admitted or not (§3.1). v_evidence_item shows it with its text.",
        {
            "decision_id": "The decision (decision.decision_id).",
            "item_id": "The item's id in its pool: E followed by item_no. Ids differ between "
                       "decisions; select by entity_key to follow one entity.",
            "item_no": "The numeric part of item_id, for ordering.",
            "source": "Where it came from: 03 recon, 04 retrieval, 05 localization, "
                      "06 impact, 07 plan, patch, live (see docs/glossary.md).",
            "kind": "The §3.1 evidence kind: source_code, symbol, retrieved_hit, "
                    "fault_entity, ..., tool_output, test_output; an agent loop's "
                    "agent_turn, file_view, harness_note. A loop part's kind is what it "
                    "is in this decision: an output shown whole is tool_output, folded to "
                    "the lines it printed a file_view of that path.",
            "entity_key": "The entity it is about (path::Qualified.name, or a path), if any.",
            "content_sha256": "Its text (evidence_text), capped at 8 KB and marked if cut.",
            "provenance": "Where it came from and why, at most 200 characters.",
            "score": "The retriever's score, for a retrieved hit.",
            "arrival_no": "Live state: its order of arrival (higher is newer).",
            "path": "The file it shows, if any.",
            "start_line": "Its first line in that file.",
            "end_line": "Its last line in that file.",
            "signature": "The symbol's signature line, if recon knows it.",
            "in_pool": "False for an item past the 256-item pool cap (kept for the record).",
            "fact_key": "Its fact identity (§3.5): two items with one fact_key state the "
                        "same fact, and dedup keeps one.",
            "original_sha256": "The uncut text (evidence_text) of an item cut at the cap.",
        },
    ),
    "decision_link": (
        "A structural link of the decision's obligation: what the gate admits by (§3.2).",
        {
            "decision_id": "The decision (decision.decision_id).",
            "link_no": "Its number within the decision; a lower number decides first.",
            "link_kind": "target_entity, change_target, insertion_point, validation_test, "
                         "validation_callee, traceback_frame, named_in_criteria, "
                         "impact_digest or obligation_dependency.",
            "entity_key": "The linked entity.",
            "path": "The linked entity's file.",
            "start_line": "The linked entity's first line.",
            "end_line": "The linked entity's last line.",
            "detail": "Why the link exists, in words.",
        },
    ),
    "item_nearness": (
        "Why a pool item no link reaches is still near the decision: the gate leaves it "
        "residual for the ranking step, or rejects it.",
        {
            "decision_id": "The decision (decision.decision_id).",
            "item_id": "The pool item (evidence_item.item_id).",
            "shared_terms": "Decision terms the item shares, space-separated.",
            "recon_hops": "Recon edges from the nearest link's entity, if within reach.",
            "nearest_link_no": "The nearest link (decision_link.link_no).",
            "near_score": "The nearness score; the gate leaves the item residual iff it "
                          "reaches NEAR_MIN_SCORE.",
        },
    ),
    "source_priority": (
        "§3.1's source order, as data: the 256-item pool cap and the 64-item admitted cap "
        "keep higher-priority sources first.",
        {
            "source": "An evidence source (03, 04, 05, 06, 07, patch, live).",
            "priority": "Its place in the order: 0 first.",
            "why": "The spec's wording for it.",
        },
    ),
    "gate_link_policy": (
        "Which link kinds admit an item for which decision type (the gate's rule as data).",
        {
            "decision_type": "localize, edit, repair or other.",
            "link_kind": "A decision_link.link_kind that admits for that decision type.",
            "meaning": "What the link means for that decision, in words.",
        },
    ),
    "representation_policy": (
        "The §3.3 table as data: (policy set, role) -> rendering. Set spec is the "
        "spec's; ablations add their own sets.",
        {
            "policy_set": "spec, or an ablation's set.",
            "role": "The item's role in the decision (change_target, requirement, "
                    "related_symbol, ...).",
            "evidence_class": "The spec table's 'Evidence kind' column, in words.",
            "rendering": "verbatim, signature, digest, truncated or omitted.",
            "rule": "The spec table's wording, for the reader.",
        },
    ),
    "item_event": (
        "One stage action on one pool item: the audit. Exactly one event per item is "
        "final (its verdict); v_why reads an item's events in order.",
        {
            "event_id": "The event's number in this store.",
            "decision_id": "The decision (decision.decision_id).",
            "item_id": "The pool item (evidence_item.item_id).",
            "event_no": "Its order within the decision.",
            "stage": "assemble, gate, rank, render, compress, dedup, order or budget.",
            "action": "What the stage did: admitted, residual, rejected, rendered, deduped, "
                      "placed, evicted, in_window, ...",
            "driver": "What admitted it or why it was dropped: obligation:<link kind>, "
                      "impact:<edge kind>, near:..., rank:..., fold:..., a ladder step, ...",
            "tokens_before": "The item's tokens before the action, where the budget "
                             "stage moved it down its ladder; else NULL (compression "
                             "gives bytes in detail; a loop window's fold is not counted: "
                             "ctxdb show gives the output whole).",
            "tokens_after": "The item's tokens after the action.",
            "is_final": "True for the item's one final verdict: in_window, rejected, "
                        "deduped, masked, evicted or folded.",
            "detail": "More about the action, in words.",
        },
    ),
    "window_item": (
        "One item of a window as sent, in order: joined, the task block and these texts "
        "are exactly what the model read. v_window_item shows it with its text.",
        {
            "decision_id": "The decision (decision.decision_id).",
            "position": "Its place in the window (from 1).",
            "item_id": "The pool item (evidence_item.item_id).",
            "role": "Its role in the decision (§3.3); an agent loop's parts: working_memory "
                    "(the agent's turns), live_current (an output as the harness sent it), "
                    "live_folded (a folded output).",
            "rendering": "verbatim, signature, digest, truncated or omitted; an agent "
                         "loop's parts also view (lines of a file read from the tree) and "
                         "pointer (a one-line stand-in, `ctxdb show` prints the whole).",
            "tier": "stable_core, working_set or transient (§3.7 eviction order).",
            "block": "front, middle or back (§3.6: critical content at the edges).",
            "edge_critical": "True when §3.6 pins it to an edge.",
            "token_count": "Its tokens in the window.",
            "shown_start_line": "The first file line whose text it shows; NULL when it "
                                "shows no body.",
            "shown_end_line": "The last file line whose text it shows.",
            "rendered_sha256": "The digest of exactly the text it adds to the window "
                               "(evidence_text; v_window_item.rendered_text).",
        },
    ),
    "budget_log": (
        "One measurement or eviction-ladder step of the budgeter (§3.7).",
        {
            "decision_id": "The decision (decision.decision_id).",
            "step_no": "Its order within the decision.",
            "ladder_step": "measured, exact_recount, or the ladder step taken "
                           "(1_mask_transient, ..., 3_evict_acceptance_detail; an agent "
                           "loop's loop_drop_reasoning, loop_fold_fresh, loop_fold_view, ...).",
            "item_id": "The item the step changed, if one.",
            "tokens_before": "The window's tokens before the step.",
            "tokens_after": "The window's tokens after it.",
            "detail": "More about the step, in words.",
        },
    ),
    "rank_call": (
        "The one ranking call of a decision (§4), if it was made: request, answer, "
        "and what the answer came to mean.",
        {
            "rank_call_id": "The call's number in this store.",
            "decision_id": "The decision (decision.decision_id); at most one call each.",
            "model": "The model asked.",
            "base_url": "The OpenAI-compatible endpoint.",
            "request_json": "The request body sent, as JSON.",
            "response_text": "The answer's text as received, if any.",
            "parse_status": "ok, or the failure class (every candidate then rejected).",
            "error": "The failure, in words.",
            "latency_ms": "How long the call took, in milliseconds.",
            "prompt_tokens": "Prompt tokens the endpoint reported.",
            "completion_tokens": "Completion tokens the endpoint reported.",
            "created_at": "When the call was made (UTC, ISO 8601).",
        },
    ),
    "rank_score": (
        "One candidate of a ranking call: its score and verdict (admit iff the score "
        "reaches the threshold).",
        {
            "rank_call_id": "The call (rank_call.rank_call_id).",
            "item_id": "The candidate pool item (evidence_item.item_id).",
            "relevance_score": "The model's score, 0 to 1; NULL when not scored.",
            "verdict": "admit or reject.",
        },
    ),
    "token_count_cache": (
        "Token counts already computed: (tokenizer, text hash) -> count.",
        {
            "tokenizer": "cl100k_base or deepseek-v4.",
            "content_sha256": "sha256 of the counted text's UTF-8.",
            "token_count": "Its exact token count.",
        },
    ),
    "outcome": (
        "What the harness achieved on an instance in a run (`ctxdb ab outcome`).",
        {
            "run_id": "The run (run.run_id).",
            "instance_id": "The instance.",
            "solved": "True when the harness resolved it.",
            "cost_usd": "Model spend on it, in US dollars.",
            "model_tokens_in": "Tokens the model read.",
            "model_tokens_out": "Tokens the model wrote.",
            "recorded_at": "When it was recorded (UTC, ISO 8601).",
        },
    ),
    "gold_fact": (
        "What an instance needed, from its gold patch and tests (the A/B's ground truth).",
        {
            "instance_id": "The instance.",
            "fact_no": "Its number within the instance.",
            "fact_kind": "edited_entity, test_function or fail_to_pass.",
            "entity_key": "The needed entity.",
            "detail": "More about the fact, in words.",
            "path": "Where the fact sits in the base commit.",
            "start_line": "Its first line there.",
            "end_line": "Its last line there.",
            "changed_start_line": "The first line the gold patch changes inside it.",
            "changed_end_line": "The last line the gold patch changes inside it.",
            "head_text": "A def/class fact's def/class line.",
        },
    ),
    "replay_in_progress": (
        "A replay under way: written as it starts, its lease renewed as its steps go, "
        "removed with the run's replay_run row or its undoing. A row whose lease ran out is a "
        "replay stopped outright (SIGKILL) or cut off from its database.",
        {
            "run_id": "The store run its windows go under.",
            "instance_id": "The recorded run's instance.",
            "lease_id": "This replay's, told from another replay of the same run.",
            "host": "The machine it runs on.",
            "pid": "Its process there.",
            "started_at": "When it started (UTC, ISO 8601).",
            "renewed_at": "When it last renewed its lease (UTC, ISO 8601).",
            "expires_at": ("It writes again before this time (UTC, ISO 8601), or it was "
                           "stopped: ctxdb verify counts its decisions from then on."),
        },
    ),
    "replay_run": (
        "A recorded agent run replayed under a store run: its trajectory, the evaluation's "
        "verdict and how faithfully its working tree was rebuilt (ctxdb replay).",
        {
            "run_id": "The store run its ctx08 windows were written under.",
            "instance_id": "The run's task (decision.instance_id of its windows).",
            "trajectory": "The trajectory file replayed.",
            "trajectory_format": "Its harness format (mini-swe-agent-1, mini-swe-agent-1.1).",
            "resolved": "The evaluation's verdict on the recorded run.",
            "decisions": "How many decisions (model calls) the run made.",
            "tree_matches_submission": ("The rebuilt tree gives exactly the submitted patch "
                                        "(blob names up to their abbreviated length)."),
            "tree_lost_at_seq": "The first decision whose tree is not known to be the run's.",
            "tree_note": "Why the tree was lost, or what differs from the submission.",
            "rerun_seconds": "Time spent re-running the run's commands in the sandbox.",
            "replay_seconds": "Time spent on everything else (requests, windows, measures).",
            "created_at": "When it was replayed (UTC, ISO 8601).",
        },
    ),
    "replay_decision": (
        "One decision of a replayed run in one arm: ctx08 (the window), current (what the "
        "harness sent), mask10 (that, with observations older than the 10 newest masked).",
        {
            "run_id": "The replay's store run.",
            "instance_id": "The run's task.",
            "seq": "k: the window sent before the agent's k-th turn.",
            "arm": "ctx08, current or mask10; ctx08-without-<rule> for an ablation row.",
            "decision_id": "The ctx08 arm's decision row (NULL for the reference arms).",
            "prompt_tokens": "Tokens of the whole prompt, the harness's own prompt included.",
            "cached_tokens": "Of those, the prefix shared with the arm's decision seq - 1.",
            "action_kind": "What the agent did next: edit, other, none (a format error) or "
                           "submit.",
            "tree_known": "The working tree at this decision is the run's (re-run so far).",
            "refused": "ctx08: the request was refused, so the prompt is the harness's own "
                       "messages alone.",
        },
    ),
    "replay_anchor": (
        "What the agent's next action took from earlier observations (ctxdb.agent.anchors).",
        {
            "run_id": "The replay's store run.",
            "instance_id": "The run's task.",
            "seq": "The decision whose next action used it.",
            "anchor_no": "Its number within the decision.",
            "anchor_class": "edit_text, edit_line, identifier or path.",
            "anchor_text": "What the action used: an edit's old text, an identifier, a path, "
                           "or for a line-addressed edit path:line.",
            "anchor_spelled": ("An edit text as the command's sed pattern spelled it, "
                               "escapes and all, when that differs (either counts as kept)."),
            "path": "The file an edit changed (edit_text, edit_line).",
            "line": "Its line number.",
            "held_by_seq": "The newest earlier step whose observation held it.",
        },
    ),
    "replay_anchor_outcome": (
        "Whether each arm's prompt kept an anchor, and where a lost one went.",
        {
            "run_id": "The replay's store run.",
            "instance_id": "The run's task.",
            "seq": "The decision.",
            "anchor_no": "The anchor (replay_anchor).",
            "arm": "ctx08, current or mask10; ctx08-without-<rule> for an ablation row.",
            "kept": "The arm's prompt held the anchor. A lost anchor counts against an "
                    "arm only where the current arm kept it (docs/replay.md).",
            "fate": "Where a lost anchor's newest holding observation went: masked, stale, "
                    "capped, cut or never_given.",
        },
    ),
    "installed_view": (
        "Which sql/views/ file made each view, so a check can tell an edited file or a "
        "view replaced by hand.",
        {
            "view_name": "The view.",
            "sql_sha256": "sha256 of the file it was made from.",
            "catalog_sha256": "sha256 of the definition the database reported at install.",
            "installed_at": "When it was installed (UTC, ISO 8601).",
        },
    ),
}

# Tables a store holds that ctxdb/models.py does not describe (Datasette lists them too).
UNMODELLED_TABLES: dict[str, tuple[str, dict[str, str]]] = {
    "alembic_version": (
        "The store's schema revision (alembic's stamp; `ctxdb db history`).",
        {"version_num": "The migration the store is at (its revision id, as `ctxdb db "
                        "current` prints it; one row)."},
    ),
}

# a pool item's decision, id, number, source, kind and entity, as views give them in a row
_POOL_ITEM_COLUMNS = {
    "decision_id": "The decision (decision.decision_id).",
    "item_id": "The pool item (evidence_item.item_id): E followed by item_no.",
    "item_no": "The numeric part of item_id, for ordering (evidence_item.item_no).",
    "source": "Where it came from (evidence_item.source): 03, 04, 05, 06, 07, patch or live.",
    "kind": "Its evidence kind (evidence_item.kind).",
    "entity_key": "The entity it is about (evidence_item.entity_key); NULL when none.",
}

# a decision's run, arm, variant, instance, seq and type, as two views give them in a row
_DECISION_OF_RUN_COLUMNS = {
    "run_id": "The run it belongs to (decision.run_id).",
    "arm": "The run's arm (run.arm): ctx08 or current.",
    "variant": "The run's variant (run.variant): default, or an ablation.",
    "instance_id": "The task instance (decision.instance_id).",
    "seq": "Its place in the instance's sequence of decisions (decision.seq, from 1).",
    "decision_type": "localize, edit, repair or other (decision.decision_type).",
}

# v_window_item_gold's columns, which v_window_gold repeats before its own two
_WINDOW_ITEM_GOLD_COLUMNS = {
    "decision_id": ("The A/B decision (v_ab_decision: the newest finished construction of "
                    "its run, instance and seq) whose window holds the item "
                    "(window_item.decision_id)."),
    "arm": "The run's arm (run.arm): ctx08 or current.",
    "variant": "The run's variant (run.variant): default, or an ablation.",
    "instance_id": "The task instance (decision.instance_id).",
    "decision_type": "localize, edit, repair or other (decision.decision_type).",
    "position": "Its place in the window (window_item.position, from 1).",
    "item_id": "The pool item (window_item.item_id).",
    "role": "Its role in the decision (window_item.role, §3.3).",
    "rendering": ("How the window shows it (window_item.rendering): verbatim, signature, "
                  "digest, ..."),
    "block": "front, middle or back (window_item.block).",
    "edge_critical": "1 when §3.6 pins it to an edge (window_item.edge_critical), else 0.",
    "token_count": "Its tokens in the window (window_item.token_count).",
    "kind": "Its evidence kind (evidence_item.kind).",
    "entity_key": "The entity it is about (evidence_item.entity_key); NULL when none.",
    "is_evidence": ("0 for the plan node and acceptance criteria (kind plan_node or "
                    "acceptance_criteria), which every arm sends; else 1."),
    "is_gold": ("1 when a gold fact of its instance has exactly its entity_key "
                "(gold_fact.entity_key), else 0 (also 0 when entity_key is NULL); no "
                "line-span match, unlike v_decision_recall."),
}

# view -> {column: what it holds}: a view itself is described by the leading comment of
# its file in sql/views/ (tests/test_analyst.py holds these to the views' columns)
VIEW_COLUMNS: dict[str, dict[str, str]] = {
    "v_decision_overview": {
        "decision_id": "The decision (decision.decision_id).",
        **_DECISION_OF_RUN_COLUMNS,
        "pool_items": ("How many evidence_item rows the decision has: every item the harness "
                       "offered, those past the 256-item pool cap (in_pool false) included."),
        "window_items": "How many items its window holds (window_item rows); 0 when none.",
        "token_count": ("Tokens of the window as sent (decision.token_count); NULL while "
                        "unfinished."),
        "token_ceiling": ("The hard ceiling of the window in tokens (decision.token_ceiling, "
                          "§3.7 TOKEN_CEILING)."),
        "tokenizer": "The tokenizer that counted the window (decision.tokenizer).",
        "flags": "Comma-separated flags (decision.flags); '' when none.",
        "created_at": "When the decision was constructed (decision.created_at; UTC, ISO 8601).",
    },
    "v_evidence_item": {
        **_POOL_ITEM_COLUMNS,
        "content": ("The item's text as the pipeline saw it (evidence_text.content of "
                    "content_sha256): capped at 8 KB and marked if cut."),
        "content_sha256": "sha256 of content (evidence_item.content_sha256).",
        "original_content": ("The uncut text of an item cut at the cap (evidence_text.content of "
                             "original_sha256); NULL when the item was not cut."),
        "provenance": ("Where it came from and why, at most 200 characters "
                       "(evidence_item.provenance)."),
        "score": "The retriever's score for a retrieved hit (evidence_item.score); else NULL.",
        "arrival_no": ("Live state's order of arrival, higher is newer "
                       "(evidence_item.arrival_no); NULL for other items."),
        "path": "The file it shows (evidence_item.path); NULL when none.",
        "start_line": "Its first line in that file (evidence_item.start_line).",
        "end_line": "Its last line in that file (evidence_item.end_line).",
        "signature": "The symbol's signature line, if recon knows it (evidence_item.signature).",
        "in_pool": "False for an item past the 256-item pool cap (evidence_item.in_pool).",
        "fact_key": ("Its fact identity (evidence_item.fact_key, §3.5): two items with one "
                     "fact_key state the same fact."),
        "original_sha256": ("sha256 of the uncut text of an item cut at the cap "
                            "(evidence_item.original_sha256); NULL when not cut."),
    },
    "v_window_item": {
        "decision_id": "The decision (decision.decision_id).",
        "position": "Its place in the window (window_item.position, from 1).",
        "item_id": "The pool item (window_item.item_id).",
        "role": "Its role in the decision (window_item.role, §3.3).",
        "rendering": ("How the window shows it (window_item.rendering): verbatim, signature, "
                      "digest, truncated or omitted; an agent loop's also view or pointer."),
        "tier": "stable_core, working_set or transient (window_item.tier, §3.7 eviction order).",
        "block": "front, middle or back (window_item.block, §3.6).",
        "edge_critical": "True when §3.6 pins it to an edge (window_item.edge_critical).",
        "token_count": "Its tokens in the window (window_item.token_count).",
        "rendered_text": ("Exactly the text it adds to the window (evidence_text.content of "
                          "rendered_sha256)."),
        "shown_start_line": ("The first file line whose text it shows "
                             "(window_item.shown_start_line); NULL when it shows no body."),
        "shown_end_line": "The last file line whose text it shows (window_item.shown_end_line).",
        "rendered_sha256": "sha256 of rendered_text (window_item.rendered_sha256).",
    },
    "v_gate_rule": {
        **_POOL_ITEM_COLUMNS,
        "arrival_no": ("Live state's order of arrival, higher is newer "
                       "(evidence_item.arrival_no); NULL for other items."),
        "priority": "Its source's place in §3.1's order (source_priority.priority, 0 first).",
        "gate_verdict": ("The rule's verdict, before the 64-item cap: out_of_pool (past the "
                         "256-item pool cap), admit (a driver reaches it), residual (it has an "
                         "item_nearness row with near_score >= 0.0, NEAR_MIN_SCORE) or reject. "
                         "An agent-loop decision ran no gate: its rows say only what the rule "
                         "would say."),
        "driver": ("What decided, the first that applies: pool_cap_256; obligation:plan_node or "
                   "obligation:acceptance_criteria (source 07); obligation:live_state (a live "
                   "or patch item of kind patch, error, traceback, tool_output or test_output); "
                   "obligation:<link kind> of the lowest-numbered admitting decision_link "
                   "naming its entity or, for a line-span item, overlapping its lines "
                   "(impact:transitive_digest for an impact_digest link); "
                   "obligation:change_target (a fault_entity or changed_entity, where the "
                   "decision type's gate_link_policy has change_target); impact:<edge kind> (a "
                   "depth-1 impact edge into its entity from a target_entity or change_target "
                   "link); near:recon_hops=N or near:shared_terms=... (residual); "
                   "near_score_below_threshold or no_structural_link (rejected)."),
    },
    "v_gate": {
        **_POOL_ITEM_COLUMNS,
        "gate_verdict": ("v_gate_rule's verdict with the 64-item cap applied: an admitted item "
                         "whose admit_rank is above 64 becomes reject; others unchanged (admit, "
                         "residual, reject or out_of_pool)."),
        "driver": ("v_gate_rule's driver, or 'admitted_cap_64: lower source priority than 64 "
                   "admitted items' for an item the cap rejected."),
        "admit_rank": ("For an item v_gate_rule admits, its place among the decision's admitted "
                       "items (from 1): by source priority, then items with an arrival_no "
                       "newest first, then the rest by item_no. Above 64 the cap rejected it "
                       "(the rank stays); NULL for an item the rule did not admit."),
    },
    "v_duplicate_fact": {
        "decision_id": "The decision (decision.decision_id).",
        "fact_key": ("The fact identity the group shares (evidence_item.fact_key, §3.5); never "
                     "'' here."),
        "item_id": "The pool item (evidence_item.item_id): E followed by item_no.",
        "item_no": "The numeric part of item_id, for ordering (evidence_item.item_no).",
        "source": "Where it came from (evidence_item.source): 03, 04, 05, 06, 07, patch or live.",
        "kind": "Its evidence kind (evidence_item.kind).",
        "entity_key": "The entity it is about (evidence_item.entity_key); NULL when none.",
        "group_size": ("How many of the decision's pool items have this fact_key (2 or more): "
                       "every item, out-of-pool and gate-rejected ones included, not only those "
                       "dedup compared."),
    },
    "v_why": {
        "decision_id": "The decision (decision.decision_id).",
        "item_id": "The pool item (item_event.item_id).",
        "event_no": ("The event's order within the decision (item_event.event_no): order by it "
                     "to read the item's path."),
        "stage": ("The stage that acted (item_event.stage): assemble, gate, rank, render, "
                  "compress, dedup, order or budget."),
        "action": ("What the stage did (item_event.action): admitted, residual, rejected, "
                   "rendered, deduped, placed, evicted, in_window, ..."),
        "driver": "What admitted it or why it was dropped (item_event.driver).",
        "tokens_before": ("The item's tokens before the action, where the budget stage moved it "
                          "down its ladder (item_event.tokens_before); else NULL."),
        "tokens_after": "The item's tokens after the action (item_event.tokens_after).",
        "is_final": "True for the item's one final verdict (item_event.is_final).",
        "detail": "More about the action, in words (item_event.detail).",
        "source": "Where it came from (evidence_item.source): 03, 04, 05, 06, 07, patch or live.",
        "kind": "Its evidence kind (evidence_item.kind).",
        "entity_key": "The entity it is about (evidence_item.entity_key); NULL when none.",
        "provenance": ("Where it came from and why, at most 200 characters "
                       "(evidence_item.provenance)."),
        "window_position": ("The item's place in the window (window_item.position), the same on "
                            "each of its events; NULL when it did not reach the window."),
        "window_block": ("front, middle or back (window_item.block); NULL when it did not reach "
                         "the window."),
        "window_rendering": ("How the window shows it (window_item.rendering); NULL when it did "
                             "not reach the window."),
    },
    "v_item_verdict": {
        **_POOL_ITEM_COLUMNS,
        "decided_at": ("The stage of the item's final event (item_event.stage): the name of a "
                       "stage, not a time; budget for an item that reached the window. NULL "
                       "when the item has no final event."),
        "verdict": ("The action of its final event (item_event.action): in_window, rejected, "
                    "deduped, masked, evicted or folded; NULL when it has none."),
        "driver": ("The driver of its final event (item_event.driver): what admitted it or why "
                   "it was dropped; NULL when it has none."),
    },
    "v_ab_decision": {
        "decision_id": ("The newest construction of its run, instance and seq "
                        "(decision.decision_id, the highest). When that one is unfinished "
                        "(token_count NULL) the seq has no row, even if an earlier one "
                        "finished."),
        **_DECISION_OF_RUN_COLUMNS,
        "token_count": "Tokens of the window as sent (decision.token_count); never NULL here.",
        "token_ceiling": ("The hard ceiling of the window in tokens (decision.token_ceiling, "
                          "§3.7 TOKEN_CEILING)."),
        "flags": "Comma-separated flags (decision.flags); '' when none.",
    },
    "v_window_item_gold": _WINDOW_ITEM_GOLD_COLUMNS,
    "v_window_gold": {
        **_WINDOW_ITEM_GOLD_COLUMNS,
        "tokens_before": ("Tokens of the window's items before it (the sum of token_count at "
                          "lower positions); what is sent besides the items, such as the task "
                          "block, is not counted."),
        "window_tokens": ("Tokens of all the window's items (the sum of their token_count), the "
                          "same on each row of the decision: less than decision.token_count, "
                          "which also counts what is sent besides the items."),
    },
    "v_decision_precision": {
        "decision_id": ("The A/B decision (v_ab_decision); one whose window holds no items has "
                        "no row."),
        "arm": "The run's arm (run.arm): ctx08 or current.",
        "variant": "The run's variant (run.variant): default, or an ablation.",
        "instance_id": "The task instance (decision.instance_id).",
        "decision_type": "localize, edit, repair or other (decision.decision_type).",
        "evidence_items": ("How many of its window items are evidence "
                           "(v_window_item_gold.is_evidence: all but the plan node and "
                           "acceptance criteria)."),
        "gold_items": ("How many of those evidence items are gold (v_window_item_gold.is_gold: "
                       "their entity_key is a gold fact's of the instance)."),
        "precision_items": ("gold_items / evidence_items, 0 to 1; NULL when the instance has no "
                            "gold facts (a live run) or evidence_items is 0."),
        "precision_tokens": ("The gold evidence items' tokens / all evidence items' tokens "
                             "(window_item.token_count), 0 to 1; NULL when the instance has no "
                             "gold facts or the evidence has no tokens."),
    },
    "v_decision_recall": {
        "decision_id": ("The A/B decision (v_ab_decision); only decisions whose instance has "
                        "gold facts have a row."),
        "arm": "The run's arm (run.arm): ctx08 or current.",
        "variant": "The run's variant (run.variant): default, or an ablation.",
        "instance_id": "The task instance (decision.instance_id).",
        "decision_type": "localize, edit, repair or other (decision.decision_type).",
        "gold_facts": ("How many distinct entity_key values the instance's gold facts have (a "
                       "test that is both test_function and fail_to_pass counts once)."),
        "held": ("How many of those a verbatim window item holds: its entity_key is the fact's, "
                 "or its path is the fact's and its lines contain the fact's "
                 "(gold_fact.start_line to end_line). The plan node counts, its entity_key "
                 "being the obligation's target entity."),
        "gold_recall": "held / gold_facts, 0 to 1.",
    },
    "v_arm_outcome": {
        "arm": "The runs' arm (run.arm): ctx08 or current.",
        "variant": "The runs' variant (run.variant): default, or an ablation.",
        "instances": ("How many (run, instance) pairs of the arm and variant have both an "
                      "outcome row and A/B decisions (v_ab_decision); an instance in two runs "
                      "counts twice."),
        "solved": "How many of those the outcome marks solved (outcome.solved).",
        "resolve_rate": "solved / instances, 0 to 1.",
        "cost_per_instance": ("The mean of outcome.cost_usd over those instances, in US dollars; "
                              "instances with no cost recorded are left out (NULL if none has "
                              "one)."),
        "tokens_per_instance": ("The mean over those instances of the context tokens sent: the "
                                "sum of token_count of the instance's A/B decisions in its run "
                                "(ctxdb's windows, not outcome.model_tokens_in)."),
        "tokens_per_solved": ("All those instances' context tokens (as tokens_per_instance sums "
                              "them) / solved; NULL when none was solved. Lower is better."),
    },
    "v_decision_cached": {
        "decision_id": ("The decision (decision.decision_id): every decision, not only "
                        "v_ab_decision's."),
        "run_id": "The run it belongs to (decision.run_id).",
        "instance_id": "The task instance (decision.instance_id).",
        "seq": "Its place in the instance's sequence of decisions (decision.seq, from 1).",
        "previous_decision_id": ("The decision just before it in its run and instance, by seq "
                                 "then decision_id: an earlier construction of the same seq "
                                 "when there is one. NULL for the first."),
        "token_count": ("Tokens of the window as sent (decision.token_count); NULL while "
                        "unfinished."),
        "cached_tokens": ("Tokens a prompt cache would serve had the previous decision been the "
                          "prompt sent last: 0 when there is none, either token_count is NULL "
                          "or the task_text differs; else the previous decision's whole "
                          "token_count when it had no window items, this one has, and that "
                          "count is at most this one's tokens besides its items (token_count "
                          "less the items' tokens); else 0 when those tokens besides the items "
                          "differ from the previous decision's; else they plus the tokens of "
                          "the items before first_changed_position (all items when none "
                          "changed)."),
        "first_changed_position": ("The first window position whose item's rendered_sha256 "
                                   "differs from the previous decision's item at that position, "
                                   "or has none there (1 when there is no previous decision); "
                                   "NULL when no item changed or the window has none."),
        "cached_at_marks_tokens": ("As cached_tokens, for a cache that serves only up to a mark "
                                   "(Anthropic's): the items counted are those before the last "
                                   "mark the previous window would carry "
                                   "(ctxdb.agent.cache_marks, whether or not it went marked) at "
                                   "or before the first changed item: after its last item, "
                                   "before its newest reasoning (else its newest step's "
                                   "trailing items), or before its first item."),
        "cache_marked": ("1 when decision.flags holds the flag cache_marked exactly (the window "
                         "went to the model with cache marks), else 0."),
    },
    "v_schema_doc": {
        "doc_no": ("The row's place: each table or view, then its columns in their order, "
                   "as docs/schema.md tells them (ORDER BY doc_no)."),
        "object_name": "The table or view described (alembic_version included).",
        "object_type": "table or view.",
        "column_name": ("The column described; NULL on the row that describes the table or view "
                        "itself."),
        "description": ("What it means, in words: ctxdb/descriptions.py's for a table or column, "
                        "the leading comment of its sql/views/ file for a view."),
    },
}
