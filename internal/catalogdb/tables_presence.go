package catalogdb

// The tables of consumer presence (docs/design.md §9.10), read and written
// by package catalog.

// presenceSchema holds the consumers' heartbeats and the queues' pauses.
//
// lily_consumers has one row per consumer instance (its primary key), so
// that its size is bounded by the fleet, not by time: each heartbeat
// upserts the row, a graceful stop deletes it, and a row not seen for a
// long while (a process that died) is pruned by the next heartbeat of
// anyone. heartbeat_ms is the instance's own interval, so that a reader
// knows when that instance is stale whatever the others' intervals.
//
// lily_queue_pauses has a row per paused queue: resuming deletes it. Who
// paused and why is also in lily_audit, which keeps the history.
const presenceSchema = `
CREATE TABLE IF NOT EXISTS lily_consumers (
	instance     TEXT    NOT NULL PRIMARY KEY,
	queue        TEXT    NOT NULL,
	name         TEXT    NOT NULL DEFAULT '',
	version      TEXT    NOT NULL DEFAULT '',
	host         TEXT    NOT NULL DEFAULT '',
	pid          INTEGER NOT NULL DEFAULT 0,
	breaker      TEXT    NOT NULL DEFAULT '',
	paused       INTEGER NOT NULL DEFAULT 0,
	heartbeat_ms INTEGER NOT NULL,
	started_at   INTEGER NOT NULL,
	last_seen    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lily_consumers_last_seen ON lily_consumers(last_seen);
CREATE TABLE IF NOT EXISTS lily_queue_pauses (
	queue     TEXT    NOT NULL PRIMARY KEY,
	reason    TEXT    NOT NULL DEFAULT '',
	actor     TEXT    NOT NULL,
	paused_at INTEGER NOT NULL
) WITHOUT ROWID;
`
