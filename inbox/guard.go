package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
)

// HeaderEntityVersion is the header that carries the version of the
// entity a message describes (an integer >= 1, e.g. the row version the
// producer wrote), read by EntityVersion.
const HeaderEntityVersion = "x-lily-entity-version"

// Entity names the entity a message changes and the version it carries.
type Entity struct {
	// Type is the kind of entity, e.g. "order". Required.
	Type string
	// ID identifies the entity within its type. Required.
	ID string
	// Version is the entity version the message carries; a message is
	// applied only if it is newer than the stored one. Must be >= 1.
	Version int64
}

// Guard applies a message's effect only if its entity version is newer
// than the one stored. Its zero value is ready to use; the package-level
// Newer uses it.
type Guard struct {
	// Hooks observe stale messages, beside the hooks of the consumer whose
	// handler calls the guard (lily.Observe). Defaults to none.
	Hooks []lily.Hook
	// Now returns the time written beside a version. Defaults to time.Now.
	Now func() time.Time
}

// Newer runs effect only if e.Version is newer than the stored version of
// (e.Type, e.ID), and stores e.Version, inside tx, the handler's own
// transaction. A message whose version is not newer — a redriven old
// message landing after newer ones, an out-of-order redelivery, the same
// version again — is stale: effect does not run, Newer returns false and
// nil, so the handler commits and the delivery is acked as a no-op (never
// dead-lettered, never applied). A stale message is reported as a
// lily.EventStale (Key "type/id") to the consumer's hooks (lilyprom counts
// lily_inbox_stale_total{queue}).
//
// If effect fails, Newer returns its error: roll tx back (the version
// written is then rolled back too) and return the error from the handler.
//
// On PostgreSQL two transactions on the same entity serialize on its
// version row: the second waits for the first and compares with what the
// first stored.
func Newer(ctx context.Context, tx Tx, d *lily.Delivery, e Entity, effect func() error) (applied bool, err error) {
	return Guard{}.Newer(ctx, tx, d, e, effect)
}

// Newer is the package-level Newer with g's settings.
func (g Guard) Newer(ctx context.Context, tx Tx, d *lily.Delivery, e Entity, effect func() error) (applied bool, err error) {
	var errs []error
	if e.Type == "" {
		errs = append(errs, errors.New("Entity.Type is empty: name the kind of entity, e.g. \"order\""))
	}
	if e.ID == "" {
		errs = append(errs, errors.New("Entity.ID is empty: pass the entity's ID"))
	}
	if e.Version < 1 {
		errs = append(errs, fmt.Errorf("Entity.Version %d: must be >= 1", e.Version))
	}
	if len(errs) > 0 {
		return false, fmt.Errorf("inbox: version guard: %w", errors.Join(errs...))
	}
	h, err := open(tx)
	if err != nil {
		return false, fmt.Errorf("inbox: version guard: %w", err)
	}
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	n, err := h.exec(ctx, `INSERT INTO lily_entity_versions (entity_type, entity_id, version, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (entity_type, entity_id) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at
		WHERE lily_entity_versions.version < excluded.version`, e.Type, e.ID, e.Version, now().UnixMilli())
	if err != nil {
		return false, fmt.Errorf("inbox: version guard: store %s/%s version %d: %w (did you run inbox.Migrate?)", e.Type, e.ID, e.Version, err)
	}
	if n == 0 {
		ev := lily.Event{Kind: lily.EventStale, Key: e.Type + "/" + e.ID}
		if d != nil {
			ev.Queue, ev.EventID = d.Queue, d.EventID
		}
		lily.Observe(ctx, ev)
		for _, hk := range g.Hooks {
			hk.Observe(ctx, ev)
		}
		return false, nil
	}
	if err := effect(); err != nil {
		return false, err
	}
	return true, nil
}

// Version returns the stored version of an entity (found false: none).
func Version(ctx context.Context, db Tx, entityType, entityID string) (version int64, found bool, err error) {
	h, err := open(db)
	if err != nil {
		return 0, false, fmt.Errorf("inbox: %w", err)
	}
	found, err = h.queryRow(ctx, `SELECT version FROM lily_entity_versions WHERE entity_type = $1 AND entity_id = $2`,
		[]any{entityType, entityID}, &version)
	if err != nil {
		return 0, false, fmt.Errorf("inbox: read the version of %s/%s: %w", entityType, entityID, err)
	}
	return version, found, nil
}

// EntityVersion reads the x-lily-entity-version header of d as Lily
// reads its own numeric headers (evidence.Int): any AMQP integer type, an
// integral float, or a decimal string (as producers without typed headers
// — Kafka, HTTP bridges — send it). found is false when the header is
// absent; a present but unreadable value is an error (dead-letter it:
// lily.Permanent), never silently version 0.
func EntityVersion(d *lily.Delivery) (version int64, found bool, err error) {
	raw, ok := d.Headers[HeaderEntityVersion]
	if !ok {
		return 0, false, nil
	}
	v, ok := evidence.Int(raw)
	if !ok || v < 1 {
		return 0, true, fmt.Errorf("inbox: header %s = %v (%T) on event %s: want an integer >= 1 (an AMQP integer or a decimal string)",
			HeaderEntityVersion, raw, raw, d.EventID)
	}
	return v, true, nil
}
