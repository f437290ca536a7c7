-- The schema a new SQLite store gets: what the migrations in migrations/ amount to at head,
-- views aside (sql/views/ is installed after). Generated: make head-schema.
CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);
INSERT INTO "alembic_version" VALUES('0013');
CREATE TABLE budget_log (
	decision_id INTEGER NOT NULL, 
	step_no INTEGER NOT NULL, 
	ladder_step VARCHAR(40) NOT NULL, 
	item_id VARCHAR(16), 
	tokens_before INTEGER NOT NULL, 
	tokens_after INTEGER NOT NULL, 
	detail TEXT, 
	PRIMARY KEY (decision_id, step_no), 
	FOREIGN KEY(decision_id) REFERENCES decision (decision_id)
);
CREATE TABLE "decision" (
	decision_id INTEGER NOT NULL, 
	run_id VARCHAR(200) NOT NULL, 
	instance_id VARCHAR(200) NOT NULL, 
	seq INTEGER NOT NULL, 
	decision_type VARCHAR(20) NOT NULL, 
	task_text TEXT NOT NULL, 
	decision_question TEXT, 
	request_json TEXT NOT NULL, 
	request_sha256 VARCHAR(64) NOT NULL, 
	tokenizer VARCHAR(40) NOT NULL, 
	token_ceiling INTEGER NOT NULL, 
	token_count INTEGER, 
	flags TEXT DEFAULT ('') NOT NULL, 
	created_at VARCHAR(32) NOT NULL, 
	PRIMARY KEY (decision_id), 
	CONSTRAINT ck_decision_type CHECK (decision_type IN ('localize', 'edit', 'repair', 'other')), 
	FOREIGN KEY(run_id) REFERENCES run (run_id)
);
CREATE TABLE decision_link (
	decision_id INTEGER NOT NULL, 
	link_no INTEGER NOT NULL, 
	link_kind VARCHAR(30) NOT NULL, 
	entity_key TEXT NOT NULL, 
	path TEXT, 
	start_line INTEGER, 
	end_line INTEGER, 
	detail TEXT, 
	PRIMARY KEY (decision_id, link_no), 
	FOREIGN KEY(decision_id) REFERENCES decision (decision_id)
);
CREATE TABLE "evidence_item" (
	decision_id INTEGER NOT NULL, 
	item_id VARCHAR(16) NOT NULL, 
	item_no INTEGER NOT NULL, 
	source VARCHAR(10) NOT NULL, 
	kind VARCHAR(30) NOT NULL, 
	entity_key TEXT, 
	content_sha256 VARCHAR(64) NOT NULL, 
	provenance VARCHAR(200) NOT NULL, 
	score FLOAT, 
	arrival_no INTEGER, 
	path TEXT, 
	start_line INTEGER, 
	end_line INTEGER, 
	signature TEXT, 
	in_pool BOOLEAN DEFAULT 1 NOT NULL, 
	fact_key TEXT, 
	original_sha256 VARCHAR(64), 
	PRIMARY KEY (decision_id, item_id), 
	CONSTRAINT fk_evidence_item_original FOREIGN KEY(original_sha256) REFERENCES evidence_text (content_sha256), 
	CONSTRAINT ck_evidence_source CHECK (source = '03' OR source = '04' OR source = '05' OR source = '06' OR source = '07' OR source = 'patch' OR source = 'live'), 
	CONSTRAINT ck_evidence_item_id CHECK (item_id = 'E' || item_no), 
	CONSTRAINT fk_evidence_item_content FOREIGN KEY(content_sha256) REFERENCES evidence_text (content_sha256), 
	CONSTRAINT ck_evidence_kind CHECK (kind = 'source_code' OR kind = 'symbol' OR kind = 'retrieved_hit' OR kind = 'fault_entity' OR kind = 'changed_entity' OR kind = 'graph_edge' OR kind = 'config' OR kind = 'downstream_obligation' OR kind = 'plan_node' OR kind = 'acceptance_criteria' OR kind = 'patch' OR kind = 'error' OR kind = 'traceback' OR kind = 'tool_output' OR kind = 'test_output' OR kind = 'agent_turn' OR kind = 'file_view' OR kind = 'harness_note'), 
	FOREIGN KEY(decision_id) REFERENCES decision (decision_id)
);
CREATE TABLE evidence_text (
	content_sha256 VARCHAR(64) NOT NULL, 
	content TEXT NOT NULL, 
	PRIMARY KEY (content_sha256)
);
CREATE TABLE gate_link_policy (
	decision_type VARCHAR(20) NOT NULL, 
	link_kind VARCHAR(30) NOT NULL, 
	meaning TEXT NOT NULL, 
	PRIMARY KEY (decision_type, link_kind)
);
INSERT INTO "gate_link_policy" VALUES('localize','validation_test','a test named in required_validation');
INSERT INTO "gate_link_policy" VALUES('localize','validation_callee','a symbol a required-validation test calls directly (recon tests edge)');
INSERT INTO "gate_link_policy" VALUES('localize','traceback_frame','a symbol on a frame of a live or pasted traceback');
INSERT INTO "gate_link_policy" VALUES('localize','named_in_criteria','an identifier in the obligation, criteria or question naming one symbol');
INSERT INTO "gate_link_policy" VALUES('edit','target_entity','the plan node''s target entity');
INSERT INTO "gate_link_policy" VALUES('edit','change_target','a fault/changed entity from 05');
INSERT INTO "gate_link_policy" VALUES('edit','insertion_point','the symbol holding the edit''s insertion point');
INSERT INTO "gate_link_policy" VALUES('edit','validation_test','a test named in required_validation');
INSERT INTO "gate_link_policy" VALUES('edit','validation_callee','a symbol a required-validation test calls directly (recon tests edge)');
INSERT INTO "gate_link_policy" VALUES('edit','traceback_frame','a symbol on a frame of a live or pasted traceback');
INSERT INTO "gate_link_policy" VALUES('edit','named_in_criteria','an identifier in the obligation, criteria or question naming one symbol');
INSERT INTO "gate_link_policy" VALUES('edit','impact_digest','the one-line digest of the change target''s transitive impact');
INSERT INTO "gate_link_policy" VALUES('repair','target_entity','the plan node''s target entity');
INSERT INTO "gate_link_policy" VALUES('repair','change_target','a fault/changed entity from 05');
INSERT INTO "gate_link_policy" VALUES('repair','insertion_point','the symbol holding the edit''s insertion point');
INSERT INTO "gate_link_policy" VALUES('repair','validation_test','a test named in required_validation');
INSERT INTO "gate_link_policy" VALUES('repair','validation_callee','a symbol a required-validation test calls directly (recon tests edge)');
INSERT INTO "gate_link_policy" VALUES('repair','traceback_frame','a symbol on a frame of a live or pasted traceback');
INSERT INTO "gate_link_policy" VALUES('repair','named_in_criteria','an identifier in the obligation, criteria or question naming one symbol');
INSERT INTO "gate_link_policy" VALUES('repair','impact_digest','the one-line digest of the change target''s transitive impact');
INSERT INTO "gate_link_policy" VALUES('other','target_entity','the plan node''s target entity');
INSERT INTO "gate_link_policy" VALUES('other','change_target','a fault/changed entity from 05');
INSERT INTO "gate_link_policy" VALUES('other','validation_test','a test named in required_validation');
INSERT INTO "gate_link_policy" VALUES('other','named_in_criteria','an identifier in the obligation, criteria or question naming one symbol');
INSERT INTO "gate_link_policy" VALUES('other','impact_digest','the one-line digest of the change target''s transitive impact');
INSERT INTO "gate_link_policy" VALUES('localize','obligation_dependency','an entity the plan node lists as a dependency of its obligation');
INSERT INTO "gate_link_policy" VALUES('edit','obligation_dependency','an entity the plan node lists as a dependency of its obligation');
INSERT INTO "gate_link_policy" VALUES('repair','obligation_dependency','an entity the plan node lists as a dependency of its obligation');
INSERT INTO "gate_link_policy" VALUES('other','obligation_dependency','an entity the plan node lists as a dependency of its obligation');
CREATE TABLE gold_fact (
	instance_id VARCHAR(200) NOT NULL, 
	fact_no INTEGER NOT NULL, 
	fact_kind VARCHAR(30) NOT NULL, 
	entity_key TEXT NOT NULL, 
	detail TEXT, path TEXT, start_line INTEGER, end_line INTEGER, changed_start_line INTEGER, changed_end_line INTEGER, head_text TEXT, 
	PRIMARY KEY (instance_id, fact_no)
);
CREATE TABLE impact_edge (
	decision_id INTEGER NOT NULL, 
	edge_no INTEGER NOT NULL, 
	head_entity TEXT NOT NULL, 
	tail_entity TEXT NOT NULL, 
	edge_kind VARCHAR(30) NOT NULL, 
	depth INTEGER NOT NULL, 
	origin VARCHAR(10) NOT NULL, 
	PRIMARY KEY (decision_id, edge_no), 
	CONSTRAINT ck_impact_edge_kind CHECK (edge_kind IN ('CalledBy', 'ConfigConsumer', 'SchemaConsumer', 'PreserveObligation')), 
	CONSTRAINT ck_impact_edge_depth CHECK (depth >= 1), 
	FOREIGN KEY(decision_id) REFERENCES decision (decision_id)
);
CREATE TABLE installed_view (
	view_name VARCHAR(100) NOT NULL, 
	sql_sha256 VARCHAR(64) NOT NULL, 
	catalog_sha256 VARCHAR(64) NOT NULL, 
	installed_at VARCHAR(32) NOT NULL, 
	PRIMARY KEY (view_name)
);
CREATE TABLE item_event (
	event_id INTEGER NOT NULL, 
	decision_id INTEGER NOT NULL, 
	item_id VARCHAR(16) NOT NULL, 
	event_no INTEGER NOT NULL, 
	stage VARCHAR(20) NOT NULL, 
	action VARCHAR(30) NOT NULL, 
	driver TEXT, 
	tokens_before INTEGER, 
	tokens_after INTEGER, 
	is_final BOOLEAN DEFAULT 0 NOT NULL, 
	detail TEXT, 
	PRIMARY KEY (event_id), 
	FOREIGN KEY(decision_id, item_id) REFERENCES evidence_item (decision_id, item_id)
);
CREATE TABLE item_nearness (
	decision_id INTEGER NOT NULL, 
	item_id VARCHAR(16) NOT NULL, 
	shared_terms TEXT DEFAULT '' NOT NULL, 
	recon_hops INTEGER, 
	nearest_link_no INTEGER, near_score FLOAT DEFAULT '0' NOT NULL, 
	PRIMARY KEY (decision_id, item_id), 
	FOREIGN KEY(decision_id, item_id) REFERENCES evidence_item (decision_id, item_id)
);
CREATE TABLE obligation (
	decision_id INTEGER NOT NULL, 
	obligation_no INTEGER NOT NULL, 
	source VARCHAR(10) NOT NULL, 
	node_id VARCHAR(200), 
	obligation_text TEXT NOT NULL, 
	target_entity TEXT, 
	preconditions_json TEXT DEFAULT '[]' NOT NULL, 
	required_validation_json TEXT DEFAULT '[]' NOT NULL, 
	acceptance_criteria_json TEXT DEFAULT '[]' NOT NULL, 
	insertion_path TEXT, 
	insertion_line INTEGER, dependencies_json TEXT DEFAULT '[]' NOT NULL, insertion_end_line INTEGER, 
	PRIMARY KEY (decision_id, obligation_no), 
	FOREIGN KEY(decision_id) REFERENCES decision (decision_id)
);
CREATE TABLE outcome (
	run_id VARCHAR(200) NOT NULL, 
	instance_id VARCHAR(200) NOT NULL, 
	solved BOOLEAN NOT NULL, 
	cost_usd FLOAT, 
	model_tokens_in INTEGER, 
	model_tokens_out INTEGER, 
	recorded_at VARCHAR(32) NOT NULL, 
	PRIMARY KEY (run_id, instance_id), 
	FOREIGN KEY(run_id) REFERENCES run (run_id)
);
CREATE TABLE rank_call (
	rank_call_id INTEGER NOT NULL, 
	decision_id INTEGER NOT NULL, 
	model VARCHAR(100) NOT NULL, 
	base_url TEXT NOT NULL, 
	request_json TEXT NOT NULL, 
	response_text TEXT, 
	parse_status VARCHAR(40) NOT NULL, 
	error TEXT, 
	latency_ms FLOAT, 
	prompt_tokens INTEGER, 
	completion_tokens INTEGER, 
	created_at VARCHAR(32) NOT NULL, 
	PRIMARY KEY (rank_call_id), 
	CONSTRAINT uq_rank_call_one_per_decision UNIQUE (decision_id), 
	FOREIGN KEY(decision_id) REFERENCES decision (decision_id)
);
CREATE TABLE rank_score (
	rank_call_id INTEGER NOT NULL, 
	item_id VARCHAR(16) NOT NULL, 
	relevance_score FLOAT, 
	verdict VARCHAR(10) NOT NULL, 
	PRIMARY KEY (rank_call_id, item_id), 
	FOREIGN KEY(rank_call_id) REFERENCES rank_call (rank_call_id)
);
CREATE TABLE replay_anchor (
	run_id VARCHAR(200) NOT NULL, 
	instance_id VARCHAR(200) NOT NULL, 
	seq INTEGER NOT NULL, 
	anchor_no INTEGER NOT NULL, 
	anchor_class VARCHAR(20) NOT NULL, 
	anchor_text TEXT NOT NULL, 
	path TEXT, 
	line INTEGER, 
	held_by_seq INTEGER, anchor_spelled TEXT, 
	PRIMARY KEY (run_id, instance_id, seq, anchor_no), 
	FOREIGN KEY(run_id, instance_id) REFERENCES replay_run (run_id, instance_id)
);
CREATE TABLE "replay_anchor_outcome" (
	run_id VARCHAR(200) NOT NULL, 
	instance_id VARCHAR(200) NOT NULL, 
	seq INTEGER NOT NULL, 
	anchor_no INTEGER NOT NULL, 
	arm VARCHAR(40) NOT NULL, 
	kept BOOLEAN NOT NULL, 
	fate VARCHAR(20), 
	PRIMARY KEY (run_id, instance_id, seq, anchor_no, arm), 
	CONSTRAINT ck_replay_anchor_outcome_arm CHECK (arm IN ('ctx08', 'current', 'mask10') OR arm LIKE 'ctx08-without-%'), 
	FOREIGN KEY(run_id, instance_id, seq, anchor_no) REFERENCES replay_anchor (run_id, instance_id, seq, anchor_no)
);
CREATE TABLE "replay_decision" (
	run_id VARCHAR(200) NOT NULL, 
	instance_id VARCHAR(200) NOT NULL, 
	seq INTEGER NOT NULL, 
	arm VARCHAR(40) NOT NULL, 
	decision_id INTEGER, 
	prompt_tokens INTEGER NOT NULL, 
	cached_tokens INTEGER NOT NULL, 
	action_kind VARCHAR(20) NOT NULL, 
	tree_known BOOLEAN NOT NULL, 
	refused BOOLEAN NOT NULL, 
	PRIMARY KEY (run_id, instance_id, seq, arm), 
	CONSTRAINT ck_replay_decision_action_kind CHECK (action_kind IN ('edit', 'other', 'none', 'submit')), 
	CONSTRAINT ck_replay_decision_cached_tokens CHECK (cached_tokens >= 0 AND cached_tokens <= prompt_tokens), 
	CONSTRAINT ck_replay_decision_arm CHECK (arm IN ('ctx08', 'current', 'mask10') OR arm LIKE 'ctx08-without-%'), 
	FOREIGN KEY(run_id, instance_id) REFERENCES replay_run (run_id, instance_id), 
	FOREIGN KEY(decision_id) REFERENCES decision (decision_id)
);
CREATE TABLE replay_in_progress (
	run_id VARCHAR(200) NOT NULL, 
	instance_id VARCHAR(200) NOT NULL, 
	lease_id VARCHAR(32) NOT NULL, 
	host VARCHAR(255) NOT NULL, 
	pid INTEGER NOT NULL, 
	started_at VARCHAR(32) NOT NULL, 
	renewed_at VARCHAR(32) NOT NULL, 
	expires_at VARCHAR(32) NOT NULL, 
	PRIMARY KEY (run_id, instance_id), 
	FOREIGN KEY(run_id) REFERENCES run (run_id)
);
CREATE TABLE replay_run (
	run_id VARCHAR(200) NOT NULL, 
	instance_id VARCHAR(200) NOT NULL, 
	trajectory TEXT NOT NULL, 
	trajectory_format VARCHAR(40) NOT NULL, 
	resolved BOOLEAN, 
	decisions INTEGER NOT NULL, 
	tree_matches_submission BOOLEAN, 
	tree_lost_at_seq INTEGER, 
	tree_note TEXT, 
	rerun_seconds FLOAT, 
	replay_seconds FLOAT, 
	created_at VARCHAR(32) NOT NULL, 
	PRIMARY KEY (run_id, instance_id), 
	FOREIGN KEY(run_id) REFERENCES run (run_id)
);
CREATE TABLE representation_policy (
	policy_set VARCHAR(60) NOT NULL, 
	role VARCHAR(40) NOT NULL, 
	evidence_class TEXT NOT NULL, 
	rendering VARCHAR(20) NOT NULL, 
	rule TEXT NOT NULL, 
	PRIMARY KEY (policy_set, role), 
	CONSTRAINT ck_policy_rendering CHECK (rendering IN ('verbatim', 'signature', 'digest', 'truncated', 'omitted'))
);
INSERT INTO "representation_policy" VALUES('spec','change_target','change target (fault/changed entity, 05/06)','verbatim','the code being edited');
INSERT INTO "representation_policy" VALUES('spec','insertion_point','insertion-point code','verbatim','the code immediately before/at the edit site: the strongest edit-conditioning signal');
INSERT INTO "representation_policy" VALUES('spec','requirement','requirement + acceptance criteria (07)','verbatim','the goal the current obligation serves');
INSERT INTO "representation_policy" VALUES('spec','related_symbol','related symbols (03 recon, 04 hits)','signature','name, params, return, one-line doc; never body unless the decision must reason over it');
INSERT INTO "representation_policy" VALUES('spec','direct_impact','impact neighborhood (06 direct edges)','signature','signatures + only the call sites of direct obligations, never full consumer bodies');
INSERT INTO "representation_policy" VALUES('spec','transitive_impact','wider impact DAG (06 transitive)','digest','a fixed one-line structured digest of the downstream reach');
INSERT INTO "representation_policy" VALUES('spec','test_reasoned_over','a related test (07 validation / 04 hit)','verbatim','body, because the decision reasons over the test');
INSERT INTO "representation_policy" VALUES('spec','test_named','a related test (07 validation / 04 hit)','signature','its name + one-line expectation, because the decision does not reason over it');
INSERT INTO "representation_policy" VALUES('spec','config_consumer','config / schema consumer (06)','signature','signature of the consumed schema + the consumer binding line');
INSERT INTO "representation_policy" VALUES('spec','live_current','patch / error / traceback / test output (live)','verbatim','the current failing state: freshly relevant, short-lived');
INSERT INTO "representation_policy" VALUES('spec','stale','stale or superseded item (live history)','omitted','already falsified or an old version: dropped before ordering (P6)');
INSERT INTO "representation_policy" VALUES('all_verbatim','change_target','change target (fault/changed entity, 05/06)','verbatim','ablation all_verbatim: the code being edited');
INSERT INTO "representation_policy" VALUES('all_verbatim','config_consumer','config / schema consumer (06)','verbatim','ablation all_verbatim: signature of the consumed schema + the consumer binding line');
INSERT INTO "representation_policy" VALUES('all_verbatim','direct_impact','impact neighborhood (06 direct edges)','verbatim','ablation all_verbatim: signatures + only the call sites of direct obligations, never full consumer bodies');
INSERT INTO "representation_policy" VALUES('all_verbatim','insertion_point','insertion-point code','verbatim','ablation all_verbatim: the code immediately before/at the edit site: the strongest edit-conditioning signal');
INSERT INTO "representation_policy" VALUES('all_verbatim','live_current','patch / error / traceback / test output (live)','verbatim','ablation all_verbatim: the current failing state: freshly relevant, short-lived');
INSERT INTO "representation_policy" VALUES('all_verbatim','related_symbol','related symbols (03 recon, 04 hits)','verbatim','ablation all_verbatim: name, params, return, one-line doc; never body unless the decision must reason over it');
INSERT INTO "representation_policy" VALUES('all_verbatim','requirement','requirement + acceptance criteria (07)','verbatim','ablation all_verbatim: the goal the current obligation serves');
INSERT INTO "representation_policy" VALUES('all_verbatim','stale','stale or superseded item (live history)','omitted','already falsified or an old version: dropped before ordering (P6)');
INSERT INTO "representation_policy" VALUES('all_verbatim','test_named','a related test (07 validation / 04 hit)','verbatim','ablation all_verbatim: its name + one-line expectation, because the decision does not reason over it');
INSERT INTO "representation_policy" VALUES('all_verbatim','test_reasoned_over','a related test (07 validation / 04 hit)','verbatim','ablation all_verbatim: body, because the decision reasons over the test');
INSERT INTO "representation_policy" VALUES('all_verbatim','transitive_impact','wider impact DAG (06 transitive)','verbatim','ablation all_verbatim: a fixed one-line structured digest of the downstream reach');
INSERT INTO "representation_policy" VALUES('no_signatures','change_target','change target (fault/changed entity, 05/06)','verbatim','the code being edited');
INSERT INTO "representation_policy" VALUES('no_signatures','config_consumer','config / schema consumer (06)','verbatim','ablation no_signatures: signature of the consumed schema + the consumer binding line');
INSERT INTO "representation_policy" VALUES('no_signatures','direct_impact','impact neighborhood (06 direct edges)','verbatim','ablation no_signatures: signatures + only the call sites of direct obligations, never full consumer bodies');
INSERT INTO "representation_policy" VALUES('no_signatures','insertion_point','insertion-point code','verbatim','the code immediately before/at the edit site: the strongest edit-conditioning signal');
INSERT INTO "representation_policy" VALUES('no_signatures','live_current','patch / error / traceback / test output (live)','verbatim','the current failing state: freshly relevant, short-lived');
INSERT INTO "representation_policy" VALUES('no_signatures','related_symbol','related symbols (03 recon, 04 hits)','verbatim','ablation no_signatures: name, params, return, one-line doc; never body unless the decision must reason over it');
INSERT INTO "representation_policy" VALUES('no_signatures','requirement','requirement + acceptance criteria (07)','verbatim','the goal the current obligation serves');
INSERT INTO "representation_policy" VALUES('no_signatures','stale','stale or superseded item (live history)','omitted','already falsified or an old version: dropped before ordering (P6)');
INSERT INTO "representation_policy" VALUES('no_signatures','test_named','a related test (07 validation / 04 hit)','verbatim','ablation no_signatures: its name + one-line expectation, because the decision does not reason over it');
INSERT INTO "representation_policy" VALUES('no_signatures','test_reasoned_over','a related test (07 validation / 04 hit)','verbatim','body, because the decision reasons over the test');
INSERT INTO "representation_policy" VALUES('no_signatures','transitive_impact','wider impact DAG (06 transitive)','digest','a fixed one-line structured digest of the downstream reach');
INSERT INTO "representation_policy" VALUES('no_digests','change_target','change target (fault/changed entity, 05/06)','verbatim','the code being edited');
INSERT INTO "representation_policy" VALUES('no_digests','config_consumer','config / schema consumer (06)','signature','signature of the consumed schema + the consumer binding line');
INSERT INTO "representation_policy" VALUES('no_digests','direct_impact','impact neighborhood (06 direct edges)','signature','signatures + only the call sites of direct obligations, never full consumer bodies');
INSERT INTO "representation_policy" VALUES('no_digests','insertion_point','insertion-point code','verbatim','the code immediately before/at the edit site: the strongest edit-conditioning signal');
INSERT INTO "representation_policy" VALUES('no_digests','live_current','patch / error / traceback / test output (live)','verbatim','the current failing state: freshly relevant, short-lived');
INSERT INTO "representation_policy" VALUES('no_digests','related_symbol','related symbols (03 recon, 04 hits)','signature','name, params, return, one-line doc; never body unless the decision must reason over it');
INSERT INTO "representation_policy" VALUES('no_digests','requirement','requirement + acceptance criteria (07)','verbatim','the goal the current obligation serves');
INSERT INTO "representation_policy" VALUES('no_digests','stale','stale or superseded item (live history)','omitted','already falsified or an old version: dropped before ordering (P6)');
INSERT INTO "representation_policy" VALUES('no_digests','test_named','a related test (07 validation / 04 hit)','signature','its name + one-line expectation, because the decision does not reason over it');
INSERT INTO "representation_policy" VALUES('no_digests','test_reasoned_over','a related test (07 validation / 04 hit)','verbatim','body, because the decision reasons over the test');
INSERT INTO "representation_policy" VALUES('no_digests','transitive_impact','wider impact DAG (06 transitive)','omitted','ablation no_digests: a fixed one-line structured digest of the downstream reach');
CREATE TABLE run (
	run_id VARCHAR(200) NOT NULL, 
	arm VARCHAR(20) DEFAULT 'ctx08' NOT NULL, 
	variant VARCHAR(100) DEFAULT 'default' NOT NULL, 
	created_at VARCHAR(32) NOT NULL, 
	settings_json TEXT DEFAULT '{}' NOT NULL, 
	note TEXT, 
	PRIMARY KEY (run_id), 
	CONSTRAINT ck_run_arm CHECK (arm IN ('ctx08', 'current'))
);
CREATE TABLE source_priority (
	source VARCHAR(10) NOT NULL, 
	priority INTEGER NOT NULL, 
	why TEXT NOT NULL, 
	PRIMARY KEY (source)
);
INSERT INTO "source_priority" VALUES('07',0,'plan obligations first (§3.1)');
INSERT INTO "source_priority" VALUES('05',0,'the localized change target ranks with the plan node');
INSERT INTO "source_priority" VALUES('06',1,'impact edges next');
INSERT INTO "source_priority" VALUES('04',2,'retrieved hits next');
INSERT INTO "source_priority" VALUES('03',3,'recon next');
INSERT INTO "source_priority" VALUES('live',4,'live state next');
INSERT INTO "source_priority" VALUES('patch',4,'the current patch is live state');
CREATE TABLE token_count_cache (
	tokenizer VARCHAR(40) NOT NULL, 
	content_sha256 VARCHAR(64) NOT NULL, 
	token_count INTEGER NOT NULL, 
	PRIMARY KEY (tokenizer, content_sha256)
);
CREATE TABLE "window_item" (
	decision_id INTEGER NOT NULL, 
	position INTEGER NOT NULL, 
	item_id VARCHAR(16) NOT NULL, 
	role VARCHAR(40) NOT NULL, 
	rendering VARCHAR(20) NOT NULL, 
	tier VARCHAR(20) NOT NULL, 
	block VARCHAR(10) NOT NULL, 
	edge_critical BOOLEAN NOT NULL, 
	token_count INTEGER NOT NULL, 
	shown_start_line INTEGER, 
	shown_end_line INTEGER, 
	rendered_sha256 VARCHAR(64) NOT NULL, 
	PRIMARY KEY (decision_id, position), 
	CONSTRAINT ck_window_tier CHECK (tier IN ('stable_core', 'working_set', 'transient')), 
	CONSTRAINT ck_window_block CHECK (block IN ('front', 'middle', 'back')), 
	CONSTRAINT fk_window_item_rendered FOREIGN KEY(rendered_sha256) REFERENCES evidence_text (content_sha256), 
	FOREIGN KEY(decision_id) REFERENCES decision (decision_id), 
	FOREIGN KEY(decision_id, item_id) REFERENCES evidence_item (decision_id, item_id)
);
CREATE INDEX ix_item_event_item ON item_event (decision_id, item_id);
CREATE INDEX ix_decision_link_entity ON decision_link (decision_id, entity_key);
CREATE INDEX ix_decision_run_instance_seq ON decision (run_id, instance_id, seq);
CREATE INDEX ix_impact_edge_tail ON impact_edge (decision_id, tail_entity, depth, edge_no);
CREATE INDEX ix_evidence_item_fact ON evidence_item (decision_id, fact_key);
CREATE INDEX ix_window_item_item ON window_item (decision_id, item_id);
