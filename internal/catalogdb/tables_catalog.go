package catalogdb

// The tables of package catalog: the entries, the audit log, triage, the
// search index, edited body versions, foreign dead-letter queues and
// leases. (The first release's schema also holds the ledger's two tables,
// lily_ledger and lily_ledger_events, which package ledger reads and
// writes.)

// schema creates the catalog tables. Times are Unix milliseconds (UTC).
const schema = `
CREATE TABLE IF NOT EXISTS lily_dlq_entries (
	id               INTEGER PRIMARY KEY,
	queue            TEXT    NOT NULL,
	event_id         TEXT    NOT NULL,
	msg_key          TEXT    NOT NULL DEFAULT '',
	msg_type         TEXT    NOT NULL DEFAULT '',
	body             BLOB,
	headers          BLOB,
	body_sha256      TEXT    NOT NULL,
	reason           TEXT    NOT NULL,
	error_type       TEXT    NOT NULL DEFAULT '',
	error_message    TEXT    NOT NULL DEFAULT '',
	fingerprint      TEXT    NOT NULL DEFAULT '',
	consumer_version TEXT    NOT NULL DEFAULT '',
	source           TEXT    NOT NULL DEFAULT '',
	delivery_count   INTEGER NOT NULL DEFAULT 0,
	retry_count      INTEGER NOT NULL DEFAULT 0,
	redrive_count    INTEGER NOT NULL DEFAULT 0,
	state            TEXT    NOT NULL DEFAULT 'pending',
	dead_lettered_at INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	-- dl_key identifies one dead-lettering of one message, so that
	-- ingesting the same broker dead letter twice adds one entry.
	dl_key           TEXT,
	-- duplicates counts further copies of the same dead-lettering that an
	-- at-least-once hand-off delivered (the copy was confirmed, the
	-- original's ack was lost, the message was dead-lettered again).
	duplicates       INTEGER NOT NULL DEFAULT 0,
	-- The last decision about the entry (redrive, discard, erase, expire,
	-- needs_manual): when, who and why. Every decision is also in lily_audit.
	decided_at       INTEGER,
	decided_by       TEXT    NOT NULL DEFAULT '',
	decision         TEXT    NOT NULL DEFAULT '',
	-- erased_at is set when the body and headers were removed (lily dlq
	-- erase): the row stays as a tombstone.
	erased_at        INTEGER,
	-- hold_key is, for a parked entry, the held key it waits behind: the
	-- message key, or "partition:N" when ordering block holds a partition.
	hold_key         TEXT    NOT NULL DEFAULT '',
	-- source_coords locates the failed copy inside its source, where the
	-- transport has coordinates ("p<partition>/o<offset>" on a log; empty
	-- on a queue). With the event ID, the body hash and the source it
	-- decides whether two dead letters are the same dead-lettering.
	source_coords    TEXT    NOT NULL DEFAULT '',
	-- body_size and headers_size keep the sizes in bytes when the body and
	-- headers are removed (erase, discard, expire); NULL while they are
	-- there (their LENGTH is the size).
	body_size        INTEGER,
	headers_size     INTEGER
);
CREATE TABLE IF NOT EXISTS lily_ledger (
	queue    TEXT PRIMARY KEY,
	accepted INTEGER NOT NULL DEFAULT 0,
	acked    INTEGER NOT NULL DEFAULT 0
);
-- For broker transports, accepted and acked are counted once per message
-- identity (ledgerKey: the event ID and a digest of the body): a
-- redelivered message acked twice, or a redriven message published again,
-- is not counted again, while two different bodies that share an event ID
-- count as two messages. Rows written by an older Lily hold the bare
-- event ID and still match it.
CREATE TABLE IF NOT EXISTS lily_ledger_events (
	queue    TEXT    NOT NULL,
	kind     TEXT    NOT NULL,
	event_id TEXT    NOT NULL,
	at       INTEGER NOT NULL,
	PRIMARY KEY (queue, kind, event_id)
) WITHOUT ROWID;
`

// indexes serve the work-list queries: paging by queue and state (redrive,
// discard, expire, list), lookups by event ID (observe, duplicates), and
// one covering index per grouping column so that 'lily dlq group' reads an
// index in order instead of sorting the table.
const indexes = `
CREATE UNIQUE INDEX IF NOT EXISTS lily_dlq_entries_dl_key ON lily_dlq_entries(dl_key) WHERE dl_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS lily_dlq_entries_queue_state ON lily_dlq_entries(queue, state, id);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_event ON lily_dlq_entries(event_id);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_state_id ON lily_dlq_entries(state, id);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_time ON lily_dlq_entries(queue, state, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_queue_time ON lily_dlq_entries(queue, dead_lettered_at);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_key ON lily_dlq_entries(msg_key);
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_reason ON lily_dlq_entries(reason, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_error_type ON lily_dlq_entries(error_type, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_fingerprint ON lily_dlq_entries(fingerprint, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_consumer_version ON lily_dlq_entries(consumer_version, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
CREATE INDEX IF NOT EXISTS lily_dlq_entries_held_source ON lily_dlq_entries(source, state, queue, dead_lettered_at) WHERE state IN ('pending', 'parked', 'needs_manual');
`

// auditTable is the append-only audit log: triggers refuse every UPDATE
// and DELETE, so a row, once committed, stays as written (auditSchema on
// SQLite, pgAuditTriggers on PostgreSQL).
const auditTable = `
CREATE TABLE IF NOT EXISTS lily_audit (
	id        INTEGER PRIMARY KEY,
	op        TEXT    NOT NULL,
	at        INTEGER NOT NULL,
	actor     TEXT    NOT NULL,
	action    TEXT    NOT NULL,
	selector  TEXT    NOT NULL DEFAULT '',
	dry_run   INTEGER NOT NULL DEFAULT 0,
	count     INTEGER NOT NULL DEFAULT 0,
	event_ids TEXT    NOT NULL DEFAULT '[]',
	outcome   TEXT    NOT NULL,
	detail    TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS lily_audit_at ON lily_audit(at);
`

// auditSchema is the SQLite audit log with its triggers.
const auditSchema = auditTable + `
CREATE TRIGGER IF NOT EXISTS lily_audit_no_update BEFORE UPDATE ON lily_audit
BEGIN SELECT RAISE(ABORT, 'lily_audit is append-only'); END;
CREATE TRIGGER IF NOT EXISTS lily_audit_no_delete BEFORE DELETE ON lily_audit
BEGIN SELECT RAISE(ABORT, 'lily_audit is append-only'); END;
`

// triageTables hold who owns a dead letter, what state its investigation
// is in, where the ticket is, and an append-only note history — for one
// entry (lily_triage_entries) or for a group: the entries of one queue
// sharing an error fingerprint (lily_triage_groups). An entry's own status
// wins over its group's; an entry without one inherits its group's, so a
// new dead letter of a known_issue fingerprint is known at once.
const triageTables = `
CREATE TABLE IF NOT EXISTS lily_triage_entries (
	entry_id   INTEGER NOT NULL,
	assignee   TEXT    NOT NULL DEFAULT '',
	status     TEXT    NOT NULL DEFAULT '',
	ticket     TEXT    NOT NULL DEFAULT '',
	updated_at INTEGER NOT NULL,
	updated_by TEXT    NOT NULL,
	PRIMARY KEY (entry_id)
);
CREATE TABLE IF NOT EXISTS lily_triage_groups (
	queue       TEXT    NOT NULL,
	fingerprint TEXT    NOT NULL,
	assignee    TEXT    NOT NULL DEFAULT '',
	status      TEXT    NOT NULL DEFAULT '',
	ticket      TEXT    NOT NULL DEFAULT '',
	updated_at  INTEGER NOT NULL,
	updated_by  TEXT    NOT NULL,
	PRIMARY KEY (queue, fingerprint)
);
CREATE INDEX IF NOT EXISTS lily_triage_groups_status ON lily_triage_groups(status);
CREATE TABLE IF NOT EXISTS lily_triage_notes (
	id          INTEGER PRIMARY KEY,
	entry_id    INTEGER NOT NULL DEFAULT 0,
	queue       TEXT    NOT NULL,
	fingerprint TEXT    NOT NULL DEFAULT '',
	at          INTEGER NOT NULL,
	author      TEXT    NOT NULL,
	note        TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS lily_triage_notes_entry ON lily_triage_notes(entry_id, id);
CREATE INDEX IF NOT EXISTS lily_triage_notes_group ON lily_triage_notes(queue, fingerprint, entry_id, id);
`

// triageSchema is the SQLite form: the note history is append-only.
const triageSchema = triageTables + `
CREATE TRIGGER IF NOT EXISTS lily_triage_notes_no_update BEFORE UPDATE ON lily_triage_notes
BEGIN SELECT RAISE(ABORT, 'lily_triage_notes is append-only'); END;
CREATE TRIGGER IF NOT EXISTS lily_triage_notes_no_delete BEFORE DELETE ON lily_triage_notes
BEGIN SELECT RAISE(ABORT, 'lily_triage_notes is append-only'); END;
`

// The search index (lily dlq search) holds, per entry, its error message
// and its body after the redactors: never the raw body, which stays in
// the entry. It is written in the transaction that inserts the entry and
// removed by a trigger in the transaction that removes the entry's data
// (discard, expire, erase) or the entry itself.
//
// SQLite: an FTS5 table whose rowid is the entry ID. PostgreSQL: a table
// with the text and a tsvector under a GIN index. Both are fed the same
// tokens — Unicode letters and digits, lower-cased — so a query finds the
// same entries on either store.
const searchSchema = `
CREATE VIRTUAL TABLE IF NOT EXISTS lily_dlq_search USING fts5(text, tokenize = 'unicode61 remove_diacritics 0');
CREATE TRIGGER IF NOT EXISTS lily_dlq_search_remove AFTER UPDATE OF body ON lily_dlq_entries WHEN NEW.body IS NULL
BEGIN DELETE FROM lily_dlq_search WHERE rowid = NEW.id; END;
CREATE TRIGGER IF NOT EXISTS lily_dlq_search_delete AFTER DELETE ON lily_dlq_entries
BEGIN DELETE FROM lily_dlq_search WHERE rowid = OLD.id; END;
CREATE TABLE IF NOT EXISTS lily_search_backfill (id INTEGER PRIMARY KEY, upto INTEGER NOT NULL, next INTEGER NOT NULL);
INSERT INTO lily_search_backfill(id, upto, next) SELECT 1, COALESCE(MAX(id), 0), 0 FROM lily_dlq_entries WHERE true ON CONFLICT DO NOTHING;
`

// editSchema holds the edited versions of entry bodies (lily dlq edit).
// The entry row keeps the original body (version 0) and its hash, the
// identity of the dead-lettering; each edit adds a version here. A
// discard, expiry or erase removes the bodies of every version and keeps
// their hashes and sizes (erased_at set), in the same transaction.
const editSchema = `
CREATE TABLE IF NOT EXISTS lily_dlq_versions (
	entry_id    INTEGER NOT NULL,
	version     INTEGER NOT NULL,
	body        BLOB,
	body_sha256 TEXT    NOT NULL,
	body_size   INTEGER NOT NULL,
	prev_sha256 TEXT    NOT NULL,
	edited_by   TEXT    NOT NULL,
	edited_at   INTEGER NOT NULL,
	reason      TEXT    NOT NULL,
	op          TEXT    NOT NULL,
	erased_at   INTEGER,
	PRIMARY KEY (entry_id, version)
);
`

// foreignSchema registers the dead-letter queues that another framework
// fills (MassTransit's <queue>_error, a queue fed by a RabbitMQ dead-letter
// exchange, NServiceBus's error queue): their ledger counts what was
// ingested as accepted and what was redriven to its origin as handed back.
const foreignSchema = `
CREATE TABLE IF NOT EXISTS lily_foreign_queues (
	queue TEXT PRIMARY KEY,
	kind  TEXT NOT NULL
);
`

// leaseSchema holds the leases: a named piece of work (e.g. draining one
// queue's broker DLQ) that exactly one process does at a time, across
// every process on the catalog. expires_at is Unix milliseconds.
const leaseSchema = `
CREATE TABLE IF NOT EXISTS lily_leases (
	name       TEXT PRIMARY KEY,
	holder     TEXT NOT NULL,
	expires_at INTEGER NOT NULL
);
`
