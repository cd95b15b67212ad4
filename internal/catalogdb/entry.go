package catalogdb

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// State is the state of a catalog entry (catalog.State).
type State string

// The entry states of docs/design.md §9.
const (
	StatePending     State = "pending"
	StateRedriven    State = "redriven"
	StateDiscarded   State = "discarded"
	StateParked      State = "parked"
	StateNeedsManual State = "needs_manual"
	StateErased      State = "erased"
)

// Entry is one dead letter: the original message and the evidence of why it
// was dead-lettered — a row of lily_dlq_entries. Package catalog exports it
// as catalog.Entry.
type Entry struct {
	ID      int64
	Queue   string
	EventID string
	Key     string
	Type    string
	// Body is the original body, byte for byte.
	Body []byte
	// Headers are the headers of the dead-lettered copy: the original ones
	// plus Lily's evidence (and any foreign evidence a broker added).
	Headers transport.Headers
	// BodySHA256 is the hex SHA-256 of Body; kept when the body is erased.
	BodySHA256      string
	Reason          string
	ErrorType       string
	ErrorMessage    string
	Fingerprint     string
	ConsumerVersion string
	Source          string
	DeliveryCount   int
	RetryCount      int
	RedriveCount    int
	State           State
	DeadLetteredAt  time.Time
	UpdatedAt       time.Time
	// DLKey, when set, identifies this dead-lettering (e.g. a broker dead
	// letter being ingested): an entry with the same key is not added twice.
	DLKey string
	// DecidedAt, DecidedBy and Decision record the last decision about the
	// entry (redrive, discard, erase, retention): when, who and why. Every
	// decision is also in the audit log.
	DecidedAt time.Time
	DecidedBy string
	Decision  string
	// ErasedAt is set when the body and headers were removed — by an
	// erase, a discard or the retention's expiry, in the same transaction
	// as the decision: the entry is then a record without its data (event
	// ID, reason and evidence columns, body hash and sizes, who, when, why).
	ErasedAt time.Time
	// BodySize and HeadersSize are the sizes in bytes of the body and of
	// the stored headers (typed JSON), kept when they are removed.
	BodySize, HeadersSize int64
	// HoldKey is, for a parked entry, the held key it waits behind: its
	// message key, or "partition:N" when ordering block holds a partition
	// of a log. Defaults to Key.
	HoldKey string
	// SourceCoords locates the failed copy in its source where the
	// transport has coordinates: "p<partition>/o<offset>" on a log
	// (evidence x-lily-source-partition/-offset, or a foreign system's), ""
	// on a queue. Two dead letters are the same dead-lettering only when
	// queue, event ID, body, Source and SourceCoords all agree.
	SourceCoords string
}

// SourceCoords renders a partition and offset as Entry.SourceCoords.
func SourceCoords(hasPartition bool, partition int32, hasOffset bool, offset int64) string {
	var c string
	if hasPartition {
		c = "p" + strconv.FormatInt(int64(partition), 10)
	}
	if hasOffset {
		if c != "" {
			c += "/"
		}
		c += "o" + strconv.FormatInt(offset, 10)
	}
	return c
}

// NewEntry builds the entry for message m dead-lettered from queue with the
// given evidence headers (the copy's complete headers) and reason.
func NewEntry(queue string, m transport.Message, headers transport.Headers, reason string, now time.Time) *Entry {
	rec, _ := evidence.Decode(headers) // best effort: the headers are stored as they are
	sum := sha256.Sum256(m.Body)
	e := &Entry{
		Queue:           queue,
		EventID:         m.EventID,
		Key:             m.Key,
		Type:            m.Type,
		Body:            m.Body,
		Headers:         headers,
		BodySHA256:      hex.EncodeToString(sum[:]),
		Reason:          reason,
		ErrorType:       rec.ErrorType,
		ErrorMessage:    rec.ErrorMessage,
		Fingerprint:     evidence.Fingerprint(rec.ErrorMessage),
		ConsumerVersion: rec.ConsumerVersion,
		Source:          rec.Source,
		DeliveryCount:   rec.DeliveryCount,
		RetryCount:      rec.RetryCount,
		RedriveCount:    rec.RedriveCount,
		State:           StatePending,
		DeadLetteredAt:  now.UTC(),
		UpdatedAt:       now.UTC(),
	}
	if e.Reason == "" {
		e.Reason = string(rec.Reason)
	}
	if e.Reason == string(evidence.ReasonParked) {
		e.State = StateParked // waiting behind its key's head, not failed
	}
	e.HoldKey = rec.HoldKey
	e.SourceCoords = SourceCoords(rec.HasPartition, rec.SourcePartition, rec.HasOffset, rec.SourceOffset)
	if e.HoldKey == "" {
		e.HoldKey = e.Key
	}
	if e.Source == "" {
		e.Source = queue
	}
	return e
}

const insertSQL = `INSERT INTO lily_dlq_entries
	(queue, event_id, msg_key, msg_type, body, headers, body_sha256, reason, error_type,
	 error_message, fingerprint, consumer_version, source, delivery_count, retry_count,
	 redrive_count, state, dead_lettered_at, updated_at, dl_key, hold_key, source_coords)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT DO NOTHING RETURNING id`

// Inserter adds entries inside a caller's transaction, reusing one prepared
// statement; transports use it to dead-letter in the same transaction that
// removes the message from its queue.
type Inserter struct {
	stmt *sql.Stmt
	// search writes each added entry's search index row (search.go).
	search Indexer
}

// NewInserter prepares the insert statement on tx, a transaction on the
// SQLite database of the catalog.
func NewInserter(ctx context.Context, tx *sql.Tx) (*Inserter, error) {
	return newInserter(ctx, SQLiteTx(tx))
}

func newInserter(ctx context.Context, tx *Tx) (*Inserter, error) {
	stmt, err := tx.PrepareContext(ctx, insertSQL)
	if err != nil {
		return nil, fmt.Errorf("catalog: prepare insert: %w", err)
	}
	return &Inserter{stmt: stmt, search: NewIndexer(tx)}, nil
}

// Insert adds e and sets e.ID.
func (in *Inserter) Insert(ctx context.Context, e *Entry) error {
	hdr, err := transport.MarshalHeaders(e.Headers)
	if err != nil {
		return fmt.Errorf("catalog: entry %s: %w", e.EventID, err)
	}
	if e.State == "" {
		e.State = StatePending
	}
	if e.HoldKey == "" {
		e.HoldKey = e.Key
	}
	err = in.stmt.QueryRowContext(ctx, e.Queue, e.EventID, e.Key, e.Type, e.Body, hdr, e.BodySHA256,
		e.Reason, e.ErrorType, e.ErrorMessage, e.Fingerprint, e.ConsumerVersion, e.Source,
		e.DeliveryCount, e.RetryCount, e.RedriveCount, string(e.State),
		e.DeadLetteredAt.UnixMilli(), e.UpdatedAt.UnixMilli(), NullString(e.DLKey), e.HoldKey, e.SourceCoords).Scan(&e.ID)
	if errors.Is(err, sql.ErrNoRows) {
		e.ID = 0 // already there (same dl_key): nothing added
		return nil
	}
	if err != nil {
		return fmt.Errorf("catalog: insert entry %s: %w", e.EventID, err)
	}
	return in.search.Index(ctx, e.ID, e.ErrorMessage, e.Body)
}

// NullString stores "" as NULL (an absent dl_key, which the unique index
// leaves out).
func NullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Close releases the prepared statement.
func (in *Inserter) Close() error { return in.stmt.Close() }

// SelectCols are the columns ScanEntry reads, in its order.
const SelectCols = `id, queue, event_id, msg_key, msg_type, body, headers, body_sha256, reason,
	error_type, error_message, fingerprint, consumer_version, source, delivery_count,
	retry_count, redrive_count, state, dead_lettered_at, updated_at, decided_at, decided_by, decision,
	erased_at, hold_key, source_coords, COALESCE(body_size, LENGTH(body), 0), COALESCE(headers_size, LENGTH(headers), 0)`

// Scanner is a *sql.Row or *sql.Rows (or a wrapper that scans more
// columns after an entry's).
type Scanner interface {
	Scan(dest ...any) error
}

// ScanEntry reads an entry selected with SelectCols.
func ScanEntry(r Scanner) (*Entry, error) {
	var (
		e           Entry
		hdr         []byte
		state       string
		dlAt, updAt int64
		decAt, erAt sql.NullInt64
	)
	if err := r.Scan(&e.ID, &e.Queue, &e.EventID, &e.Key, &e.Type, &e.Body, &hdr, &e.BodySHA256,
		&e.Reason, &e.ErrorType, &e.ErrorMessage, &e.Fingerprint, &e.ConsumerVersion, &e.Source,
		&e.DeliveryCount, &e.RetryCount, &e.RedriveCount, &state, &dlAt, &updAt, &decAt, &e.DecidedBy,
		&e.Decision, &erAt, &e.HoldKey, &e.SourceCoords, &e.BodySize, &e.HeadersSize); err != nil {
		return nil, err
	}
	if hdr != nil { // nil: erased
		h, err := transport.UnmarshalHeaders(hdr)
		if err != nil {
			return nil, fmt.Errorf("catalog: entry %d: %w", e.ID, err)
		}
		e.Headers = h
	}
	e.State = State(state)
	e.DeadLetteredAt = time.UnixMilli(dlAt).UTC()
	e.UpdatedAt = time.UnixMilli(updAt).UTC()
	if decAt.Valid {
		e.DecidedAt = time.UnixMilli(decAt.Int64).UTC()
	}
	if erAt.Valid {
		e.ErasedAt = time.UnixMilli(erAt.Int64).UTC()
	}
	return &e, nil
}

// markDuplicate reports whether e repeats a dead-lettering already held in
// the catalog, as an at-least-once hand-off can deliver it twice (the DLQ
// copy was confirmed, the original's ack was lost, the message was
// dead-lettered again); if so it counts the duplicate on the held entry
// instead of adding one.
//
// The same dead-lettering means the same message failing at the same
// place: same queue, event ID, redrive generation, body bytes (SHA-256),
// source and source coordinates (partition/offset on a log), still in the
// work list. An event ID alone is never enough — foreign producers reuse
// message IDs, or set none — so two dead letters that differ in any of
// these are both kept. This is the identity the ledger counts by too
// (ledger.Key: event ID and body), so merging never unbalances it.
func markDuplicate(ctx context.Context, tx *Tx, e *Entry) (bool, error) {
	res, err := tx.ExecContext(ctx, `UPDATE lily_dlq_entries SET duplicates = duplicates + 1
		WHERE id = (SELECT id FROM lily_dlq_entries WHERE queue = ? AND event_id = ? AND redrive_count = ?
			AND body_sha256 = ? AND source = ? AND source_coords = ?
			AND state IN ('pending', 'parked', 'needs_manual') AND (dl_key IS NULL OR dl_key <> ?) LIMIT 1)`,
		e.Queue, e.EventID, e.RedriveCount, e.BodySHA256, e.Source, e.SourceCoords, e.DLKey)
	if err != nil {
		return false, fmt.Errorf("catalog: check duplicate of %s: %w", e.EventID, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// DupIdentity names the dead-lettering e is (markDuplicate's columns), the
// key an Insert locks on PostgreSQL (DB.BeginKeyed) before it asks whether
// e repeats a held one: two copies of one dead-lettering then check one
// after the other, and the second sees the first's commit.
func DupIdentity(e *Entry) string {
	var b strings.Builder
	for _, f := range []string{"dup", e.Queue, e.EventID, strconv.Itoa(e.RedriveCount), e.BodySHA256, e.Source, e.SourceCoords} {
		b.WriteString(f)
		b.WriteByte(0x1f) // not NUL: PostgreSQL's text refuses it
	}
	return b.String()
}

// InsertEntries adds entries in tx as Store.Insert does: an entry with a
// DLKey inserted before is skipped, one repeating a held dead-lettering
// is counted as its duplicate; both are left with ID 0. The keys of the
// parked entries are decided first, under their rows' locks
// (HoldParkedKeys).
func InsertEntries(ctx context.Context, tx *Tx, entries []*Entry) error {
	if err := HoldParkedKeys(ctx, tx, entries, time.Now()); err != nil {
		return err
	}
	in, err := newInserter(ctx, tx)
	if err != nil {
		return err
	}
	defer in.Close()
	for _, e := range entries {
		if e.DLKey != "" {
			dup, err := markDuplicate(ctx, tx, e)
			if err != nil {
				return err
			}
			if dup {
				e.ID = 0
				continue
			}
		}
		if err := in.Insert(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// IsHeld reports whether st is one of HeldStates.
func (st State) IsHeld() bool {
	return st == StatePending || st == StateParked || st == StateNeedsManual
}

// Valid reports whether st is one of the six entry states.
func (st State) Valid() bool {
	switch st {
	case StatePending, StateRedriven, StateDiscarded, StateParked, StateNeedsManual, StateErased:
		return true
	}
	return false
}
