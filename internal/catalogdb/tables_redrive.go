package catalogdb

// The tables of packages redrive (held keys, redrive jobs) and rules (the
// runtime's breaker transitions and acked consumer versions, the rules'
// firings).

// Held keys keep per-key ordering (docs/design.md §4, ordering "park" and "block")
// across restarts. A key is held while one of its messages has not been
// processed in order:
//
//   - held: its head (the message whose failure holds it) was dead-lettered;
//     every later message of the key is diverted, in arrival order, into the
//     catalog as a parked entry.
//   - waiting: exactly one message of the key — the allowed one: a retry
//     copy in its delay bucket, the head sent back by unpark or redrive, or
//     the next parked entry on its way back — may be processed; everything
//     else of the key is still diverted.
//
// When the allowed message succeeds, the consumer advances the key: the
// oldest parked entry is sent back to the source queue and becomes the
// allowed one, until none is left and the key is free. Messages of a key
// therefore reach the handler in their arrival order, one at a time, with
// every wait in the broker or the catalog, never in a handler.
const keySchema = `
CREATE TABLE IF NOT EXISTS lily_held_keys (
	queue            TEXT    NOT NULL,
	msg_key          TEXT    NOT NULL,
	mode             TEXT    NOT NULL,
	state            TEXT    NOT NULL,
	head_event_id    TEXT    NOT NULL,
	allowed_event_id TEXT    NOT NULL DEFAULT '',
	since            INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	PRIMARY KEY (queue, msg_key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lily_dlq_entries_parked_hold ON lily_dlq_entries(queue, hold_key, id) WHERE state = 'parked';
`

// jobsSchema holds the redrive jobs (docs/design.md §9): a redrive is a row that
// outlives the process running it. One job per queue is active at a time
// (the partial unique index; a job of every queue, queue '*', is checked
// by CreateJob's conditional insert, run under the job scope's lock on
// PostgreSQL so that two creations are checked one after the other). holder and lease_until are the
// runner's lease: a job whose lease ran out is taken over by the next
// runner and resumes after after_id, the cursor.
const jobsSchema = `
CREATE TABLE IF NOT EXISTS lily_redrive_jobs (
	id                   INTEGER PRIMARY KEY,
	op                   TEXT    NOT NULL,
	queue                TEXT    NOT NULL,
	filter               TEXT    NOT NULL,
	max_entries          INTEGER NOT NULL DEFAULT 0,
	rate_milli           INTEGER NOT NULL DEFAULT 0,
	sample               INTEGER NOT NULL DEFAULT 0,
	observe_ms           INTEGER NOT NULL DEFAULT 0,
	new_consumer_version TEXT    NOT NULL DEFAULT '',
	include_crashers     INTEGER NOT NULL DEFAULT 0,
	total                INTEGER NOT NULL DEFAULT 0,
	held_back            INTEGER NOT NULL DEFAULT 0,
	state                TEXT    NOT NULL,
	sent                 INTEGER NOT NULL DEFAULT 0,
	refused              INTEGER NOT NULL DEFAULT 0,
	failed               INTEGER NOT NULL DEFAULT 0,
	after_id             INTEGER NOT NULL DEFAULT 0,
	since_id             INTEGER NOT NULL DEFAULT 0,
	sample_at            INTEGER NOT NULL DEFAULT 0,
	sample_until         INTEGER NOT NULL DEFAULT 0,
	sample_done          INTEGER NOT NULL DEFAULT 0,
	sample_clean         INTEGER NOT NULL DEFAULT 0,
	sampled              TEXT    NOT NULL DEFAULT '[]',
	returned             TEXT    NOT NULL DEFAULT '[]',
	actor                TEXT    NOT NULL,
	created_at           INTEGER NOT NULL,
	started_at           INTEGER NOT NULL DEFAULT 0,
	updated_at           INTEGER NOT NULL,
	finished_at          INTEGER NOT NULL DEFAULT 0,
	error                TEXT    NOT NULL DEFAULT '',
	holder               TEXT    NOT NULL DEFAULT '',
	lease_until          INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS lily_redrive_jobs_active ON lily_redrive_jobs(queue) WHERE state IN ('queued', 'running', 'sampling');
CREATE INDEX IF NOT EXISTS lily_redrive_jobs_state ON lily_redrive_jobs(state, lease_until);
`

// ruleSchema holds what rule-driven redrive ([[redrive_rule]], 'lily
// serve') decides on: the circuit breakers' transitions and the consumer
// versions that acked messages, both written by the runtime through
// RuntimeRecorder, and the firings of the rules — one row per rule and
// trigger occurrence, whose primary key makes a rule fire once however many
// serve replicas look.
const ruleSchema = `
CREATE TABLE IF NOT EXISTS lily_breaker_events (
	id         INTEGER PRIMARY KEY,
	queue      TEXT    NOT NULL,
	consumer   TEXT    NOT NULL DEFAULT '',
	from_state TEXT    NOT NULL,
	to_state   TEXT    NOT NULL,
	at         INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS lily_breaker_events_queue ON lily_breaker_events(queue, consumer, id);
CREATE TABLE IF NOT EXISTS lily_consumer_versions (
	queue          TEXT    NOT NULL,
	version        TEXT    NOT NULL,
	first_acked_at INTEGER NOT NULL,
	last_acked_at  INTEGER NOT NULL,
	PRIMARY KEY (queue, version)
);
CREATE TABLE IF NOT EXISTS lily_rule_firings (
	rule       TEXT    NOT NULL,
	occurrence TEXT    NOT NULL,
	queue      TEXT    NOT NULL,
	fired_at   INTEGER NOT NULL,
	job_id     INTEGER NOT NULL DEFAULT 0,
	op         TEXT    NOT NULL,
	detail     TEXT    NOT NULL DEFAULT '',
	-- firing while the job is being made; fired once it is (or nothing
	-- was selected). A firing row left behind by a replica that died is
	-- claimed again after firingStale.
	state      TEXT    NOT NULL DEFAULT 'firing',
	PRIMARY KEY (rule, occurrence)
);
`
