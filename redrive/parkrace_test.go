package redrive

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/transport"
)

// parkedCopy is the entry a consumer parks behind key as ledger.Accounted
// does: reason parked, the key and the queue's ordering in its evidence,
// a dl_key of its own.
func parkedCopy(queue, key, id string) *catalog.Entry {
	h := transport.Headers{"app": "x"}
	evidence.Record{Reason: evidence.ReasonParked, ErrorMessage: "waits behind its key", DeadLetteredAt: testNow, HoldKey: key, HoldMode: KeyModePark}.Apply(h)
	e := catalog.NewEntry(queue, transport.Message{EventID: id, Key: key, Body: []byte(id)}, h, string(evidence.ReasonParked), testNow)
	e.DLKey = "parked/" + queue + "/" + id
	return e
}

// parkRace races, on ss (processes sharing one catalog), a consumer that
// parks a message behind a held key against an advance of that key, for
// 10 rounds of 10 keys. The consumer looks at the key outside any
// transaction (KeyState) and parks when it is held, as the runtime does
// (ordering.go, then ledger.Accounted's Settle → Store.Insert). Even keys
// wait for their allowed message, which is processed meanwhile
// (AdvanceKey); odd keys are held behind a discarded head and unparked
// (Unpark, release_next). Either may free the key when it finds nothing
// parked.
//
// At the end no parked entry is without its key: the advance that came
// first released it, or the parking found the key freed and held it again
// with the entry allowed. The consumers then finish the keys
// (ResumeKeys once the grace has passed, AdvanceKey for each message
// processed): every parked message is sent back once, none is lost, no key
// stays held.
func parkRace(t *testing.T, ss []*catalog.Store) {
	ctx := context.Background()
	const q, rounds, perRound = "orders", 10, 10
	pub := &lockedSent{}
	var mu sync.Mutex
	var parked []string
	for r := range rounds {
		keys := make([]string, perRound)
		for i := range keys {
			k := fmt.Sprintf("r%02d-k%02d", r, i)
			keys[i] = k
			head := catalog.NewEntry(q, transport.Message{EventID: k + "-head", Key: k, Body: []byte("h")},
				evidenceHeaders(evidence.ReasonPermanent, "*errors.errorString", "bad", "v1", 1, 0, 0), "", testNow)
			if err := ss[0].Insert(ctx, head); err != nil {
				t.Fatal(err)
			}
			if err := NewKeys(ss[0]).HoldKey(ctx, q, k, KeyModePark, KeyHeld, head.EventID); err != nil {
				t.Fatal(err)
			}
			if i%2 == 0 { // its allowed message is being processed
				if err := NewKeys(ss[0]).HoldKey(ctx, q, k, KeyModePark, KeyWaiting, k+"-allowed"); err != nil {
					t.Fatal(err)
				}
			} else if _, err := ss[0].Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{IDs: []int64{head.ID}}, Reason: "not valid, ever"}); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, k := range keys {
			consumer, operator := ss[i%len(ss)], ss[(i+len(ss)/2)%len(ss)]
			wg.Go(func() {
				<-start
				id := k + "-next"
				state, allowed, head, err := NewKeys(consumer).KeyState(ctx, q, k)
				if err != nil {
					t.Error(err)
					return
				}
				if state == "" || id == allowed || id == head {
					return // the key flows: the message is processed, not parked
				}
				if err := consumer.Insert(ctx, parkedCopy(q, k, id)); err != nil {
					t.Errorf("park %s: %v", id, err)
					return
				}
				mu.Lock()
				parked = append(parked, id)
				mu.Unlock()
			})
			wg.Go(func() {
				<-start
				var err error
				if i%2 == 0 {
					_, err = NewKeys(operator).AdvanceKey(ctx, q, k, pub)
				} else {
					_, err = NewKeys(operator).Unpark(ctx, unparkParams(k, pub))
				}
				if err != nil {
					t.Errorf("advance %s: %v", k, err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	db := catalogdb.Of(ss[0])
	var orphans []string
	rows, err := db.QueryContext(ctx, `SELECT event_id FROM lily_dlq_entries e WHERE state = 'parked'
		AND NOT EXISTS (SELECT 1 FROM lily_held_keys k WHERE k.queue = e.queue AND k.msg_key = e.hold_key) ORDER BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, id)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if len(orphans) > 0 {
		t.Fatalf("%d of %d parked entries have no held key (never released): %v", len(orphans), len(parked), orphans)
	}
	var reheld int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_held_keys WHERE head_event_id = allowed_event_id AND head_event_id LIKE '%-next'`).Scan(&reheld); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages parked of %d keys; %d keys were freed before their parking committed and held again", len(parked), rounds*perRound, reheld)
	// The consumers finish: the held-again entries are sent once the grace
	// has passed (made to pass here), and each message sent is processed.
	if _, err := db.ExecContext(ctx, `UPDATE lily_held_keys SET updated_at = ?`, time.Now().Add(-2*ResumeGrace).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if _, err := NewKeys(ss[0]).ResumeKeys(ctx, q, pub); err != nil {
		t.Fatal(err)
	}
	held, err := NewKeys(ss[0]).HeldKeys(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range held {
		if k.State != KeyWaiting || !slices.Contains(pub.ids, k.AllowedEventID) {
			t.Errorf("key %s is %s, allowed %q, not sent: its message is stuck", k.Key, k.State, k.AllowedEventID)
			continue
		}
		if free, err := NewKeys(ss[0]).AdvanceKey(ctx, q, k.Key, pub); err != nil || !free {
			t.Errorf("advance %s after its message was processed = %v, %v; want free", k.Key, free, err)
		}
	}
	slices.Sort(parked)
	sent := slices.Sorted(slices.Values(pub.ids))
	if !slices.Equal(sent, parked) {
		t.Errorf("sent back %v,\nwant each parked message once: %v", sent, parked)
	}
	if n, err := ss[0].CountBy(ctx, "state", catalog.Filter{Queue: q}); err != nil || n["parked"] != 0 || n["redriven"] != int64(len(parked)) {
		t.Errorf("entry states %v (%v): want none parked, %d redriven", n, err, len(parked))
	}
	if keys, err := NewKeys(ss[0]).HeldKeys(ctx, q); err != nil || len(keys) != 0 {
		t.Errorf("held keys at the end: %+v (%v), want none", keys, err)
	}
}

// TestPostgresParksRacingAdvancesExact: parkRace with four processes on
// one PostgreSQL catalog. Before the parking decided its key under the
// key's row lock, keys freed between the consumer's look and the parking's
// commit left parked entries without a held key, never released.
func TestPostgresParksRacingAdvancesExact(t *testing.T) {
	parkRace(t, catalogtest.PGFleet(t, 4))
}

// TestSQLiteParksRacingAdvancesExact: parkRace with four handles on one
// SQLite file (processes of one machine): each transaction runs alone,
// but the consumer's look at the key is outside it all the same.
func TestSQLiteParksRacingAdvancesExact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	ss := make([]*catalog.Store, 4)
	for i := range ss {
		s, err := catalog.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss[i] = s
	}
	parkRace(t, ss)
}

// TestPostgresParksOfManyKeysNeverDeadlock: four processes park batches
// over the same 20 keys at once, each batch in another order of keys,
// half of the keys held and half free (held again by the parking), 10
// rounds. A parking locks its keys' rows in (queue, key) order, whatever
// its batch's order, so none waits for another in a cycle (PostgreSQL
// would abort one with "deadlock detected"), and every parked entry ends
// with its key.
func TestPostgresParksOfManyKeysNeverDeadlock(t *testing.T) {
	ss := catalogtest.PGFleet(t, 4)
	ctx := context.Background()
	const q, nKeys = "orders", 20
	for r := range 10 {
		for j := 0; j < nKeys; j += 2 {
			if err := NewKeys(ss[0]).HoldKey(ctx, q, fmt.Sprintf("r%02d-k%02d", r, j), KeyModePark, KeyHeld, "head"); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for p, s := range ss {
			wg.Go(func() {
				batch := make([]*catalog.Entry, nKeys)
				for j := range nKeys {
					k := (j*[]int{1, 3, 7, 9}[p] + p*7) % nKeys // another order of the keys in each process
					batch[j] = parkedCopy(q, fmt.Sprintf("r%02d-k%02d", r, k), fmt.Sprintf("r%02d-k%02d-p%d", r, k, p))
				}
				<-start
				if err := s.Insert(ctx, batch...); err != nil {
					t.Errorf("round %d: park from process %d: %v", r, p, err)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	var orphans, keys, reheld int
	if err := catalogdb.Of(ss[0]).QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM lily_dlq_entries e WHERE state = 'parked'
			AND NOT EXISTS (SELECT 1 FROM lily_held_keys k WHERE k.queue = e.queue AND k.msg_key = e.hold_key)),
		(SELECT COUNT(*) FROM lily_held_keys),
		(SELECT COUNT(*) FROM lily_held_keys WHERE state = 'waiting' AND allowed_event_id LIKE '%-p_')`).Scan(&orphans, &keys, &reheld); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 || keys != 10*nKeys || reheld != 10*nKeys/2 {
		t.Errorf("%d parked entries without a key, %d keys, %d held again by a parking; want 0, %d, %d", orphans, keys, reheld, 10*nKeys, 10*nKeys/2)
	}
}
