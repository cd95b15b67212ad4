package catalog

import (
	"errors"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// Entry is one dead letter: the original message — event ID, key, type,
// body byte for byte, headers of the dead-lettered copy — and the evidence
// of why it was dead-lettered (reason, error type and message, fingerprint,
// consumer version, source, delivery, retry and redrive counts), with its
// state and the last decision about it. Its fields are documented on
// catalogdb.Entry: the one type is shared with the SQLite transport, which
// dead-letters into the catalog in its own transactions.
type Entry = catalogdb.Entry

// State is the state of a catalog entry: one of the State constants. Its
// methods IsHeld and Valid are documented on catalogdb.State.
type State = catalogdb.State

// The entry states of docs/design.md §9.
const (
	StatePending     = catalogdb.StatePending
	StateRedriven    = catalogdb.StateRedriven
	StateDiscarded   = catalogdb.StateDiscarded
	StateParked      = catalogdb.StateParked
	StateNeedsManual = catalogdb.StateNeedsManual
	StateErased      = catalogdb.StateErased
)

// ErrNotFound is returned for an entry ID that does not exist.
var ErrNotFound = errors.New("catalog: entry not found")

// NewEntry builds the entry for message m dead-lettered from queue with the
// given evidence headers (the copy's complete headers) and reason: its
// evidence columns are read from the headers, its state is pending (parked
// for reason "parked"), and its source is the queue when the headers name
// none.
func NewEntry(queue string, m transport.Message, headers transport.Headers, reason string, now time.Time) *Entry {
	return catalogdb.NewEntry(queue, m, headers, reason, now)
}
