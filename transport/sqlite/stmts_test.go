package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
)

// compilations counts the statements SQLite compiles on tr's connection
// (its authorizer runs once per compiled statement action, at prepare and
// at every re-prepare), BEGIN and COMMIT left out: the driver compiles
// those itself on every transaction.
type compilations struct {
	mu     sync.Mutex
	n      int
	sample []string
}

func countCompilations(t *testing.T, db *sql.DB) *compilations {
	t.Helper()
	ctx := context.Background()
	c := &compilations{}
	conn, err := db.Conn(ctx) // the pool's one connection
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		r, ok := dc.(msqlite.AuthorizerRegisterer)
		if !ok {
			return fmt.Errorf("driver connection %T has no RegisterAuthorizer", dc)
		}
		return r.RegisterAuthorizer(func(action msqlite.AuthorizerActionCode, arg1, arg2, _, _ string) msqlite.AuthorizerReturnCode {
			if action != msqlite.AuthTransaction {
				c.mu.Lock()
				c.n++
				if len(c.sample) < 5 {
					c.sample = append(c.sample, fmt.Sprintf("action %d %s %s", action, arg1, arg2))
				}
				c.mu.Unlock()
			}
			return msqlite.AuthorizerOK
		})
	})
	if err != nil {
		t.Fatalf("register authorizer: %v", err)
	}
	return c
}

func (c *compilations) reset() {
	c.mu.Lock()
	c.n, c.sample = 0, nil
	c.mu.Unlock()
}

func (c *compilations) count() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.sample
}

// A steady publish / receive / settle loop compiles no statement: every
// statement of the hot path is prepared once and keeps its shape (the
// lease's id list padded to a prepared size, the remainder of a publish
// split into prepared sizes, the candidate LIMIT not a bare parameter,
// which SQLite's planner would re-prepare on every new value). Before,
// every Publish prepared its INSERT, every Settle its DELETE, and every
// lease parsed an UPDATE of a new length.
func TestHotPathCompilesNoStatement(t *testing.T) {
	tr := open(t, Options{}, "q")
	ctx := context.Background()
	comp := countCompilations(t, tr.DB())
	seq := 0
	round := func(r int) {
		t.Helper()
		msgs := make([]transport.Message, 137) // 100 + 32 + 4 + 1
		for i := range msgs {
			seq++
			msgs[i] = transport.Message{EventID: "e" + strconv.Itoa(seq), Body: []byte("b")}
		}
		if err := tr.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: msgs}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		// A different Max (the LIMIT) every round, the same padded shape.
		ds := receive(t, tr, transport.ReceiveParams{Max: 130 + r, IsolateRedeliveries: true, KeyOrder: r%2 == 0})
		if len(ds) != 130+r {
			t.Fatalf("round %d: received %d, want %d", r, len(ds), 130+r)
		}
		ss := make([]transport.Settlement, len(ds))
		for i, d := range ds {
			ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
		}
		if err := settle(tr, ss...); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
	round(0) // registering the authorizer expired the prepared statements
	round(1) // both candidate queries run once again
	comp.reset()
	for r := 2; r < 6; r++ {
		round(r)
	}
	if n, sample := comp.count(); n != 0 {
		t.Errorf("hot path compiled %d statement actions in 4 rounds (%v), want 0", n, sample)
	}
	conserved(t, tr, "q", receive(t, tr, transport.ReceiveParams{Max: 1000})...)
}

// Publishes of every size around the prepared shapes store each message
// once, in order.
func TestPublishSizesAroundChunks(t *testing.T) {
	tr := open(t, Options{}, "q")
	var want []string
	for _, n := range []int{1, 2, 37, 63, 64, 99, 100, 101, 199, 237} {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("p%d-%d", n, i)
		}
		publish(t, tr, "q", ids...)
		want = append(want, ids...)
	}
	var got []string
	var ds []*transport.Delivery
	for {
		batch := receive(t, tr, transport.ReceiveParams{Max: 700}) // more than one lease chunk
		if len(batch) == 0 {
			break
		}
		for _, d := range batch {
			if string(d.Body) != "body-"+d.EventID {
				t.Fatalf("%s: body %q", d.EventID, d.Body)
			}
			got = append(got, d.EventID)
		}
		ds = append(ds, batch...)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("received %d messages, want %d in publish order", len(got), len(want))
	}
	// The bodies are kept as the driver returned them (receive.go): none
	// was overwritten by the rows and calls that followed it.
	for _, d := range ds {
		if string(d.Body) != "body-"+d.EventID {
			t.Fatalf("%s: body %q after later receives", d.EventID, d.Body)
		}
	}
	conserved(t, tr, "q", ds...)
}

// A lease lost inside a large settle batch fails alone; every other
// settlement of the batch (acks through the statement prepared once, a
// retry, a dead letter, a duplicate ack) is applied.
func TestLargeSettleBatchWithALostLease(t *testing.T) {
	clk := newClock()
	tr := open(t, Options{Now: clk.Now, VisibilityTimeout: time.Minute}, "q")
	const n = 300
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "m" + strconv.Itoa(i)
	}
	publish(t, tr, "q", ids...)
	ds := receive(t, tr, transport.ReceiveParams{Max: n, Consumer: "a"})
	if len(ds) != n {
		t.Fatalf("received %d, want %d", len(ds), n)
	}
	// Consumer b takes m7 over (as if a's lease had expired).
	if _, err := tr.db.Exec(`UPDATE lily_messages SET receive_count = receive_count + 1, lease_owner = 'b' WHERE event_id = 'm7'`); err != nil {
		t.Fatal(err)
	}
	ss := []transport.Settlement{}
	for i, d := range ds {
		switch i {
		case 3:
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Retry, Headers: transport.Headers{"x-retry-count": int32(1)}})
		case 5:
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.DeadLetter, Reason: "permanent"})
		default:
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
		}
	}
	ss = append(ss, transport.Settlement{Delivery: ds[9], Action: transport.Ack}) // a duplicate: the second fails
	errs := transport.SettleErrors(settle(tr, ss...), len(ss))
	for i, err := range errs {
		wantLost := i == 7 || i == len(ss)-1
		if wantLost != errors.Is(err, transport.ErrLeaseLost) || (!wantLost && err != nil) {
			t.Errorf("settlement %d (%s): %v", i, ss[i].Delivery.EventID, err)
		}
	}
	// Left: m7 (b's lease) and m3's retry copy.
	if got := inFlight(t, tr, "q"); got != 2 {
		t.Errorf("in flight = %d, want 2", got)
	}
	if es := entries(t, tr, "q"); len(es) != 1 || es[0].EventID != "m5" {
		t.Errorf("dead letters = %d, want m5 alone", len(es))
	}
	r := ledgerOf(t, tr)["q"]
	if r.Acked != n-3 || r.DeadLettered != 1 {
		t.Errorf("ledger %+v, want %d acked, 1 dead-lettered", r, n-3)
	}
	clk.Advance(2 * time.Minute)
	conserved(t, tr, "q", receive(t, tr, transport.ReceiveParams{Max: 10, Consumer: "c"})...)
}

// preparedSizes lists the sizes of sh that are prepared on the DB.
func preparedSizes(sh shapes) []int {
	var sizes []int
	for i, l := range sh {
		if l.st.Load() != nil {
			sizes = append(sizes, 1<<i)
		}
	}
	return sizes
}

// Open parses no sized statement; a write prepares the shapes it uses, and
// only those, before its transaction; a PublishTx that needed a shape the
// writer had not prepared parses it in its own transaction once, and the
// writer prepares it for the next one.
func TestShapesPreparedWhenFirstNeeded(t *testing.T) {
	tr := open(t, Options{}, "q")
	ctx := context.Background()
	st := tr.st
	if got := append(preparedSizes(st.insertPart), preparedSizes(st.lease)...); len(got) != 0 || st.insertFull.st.Load() != nil {
		t.Fatalf("after Open: prepared sizes %v (full %v), want none", got, st.insertFull.st.Load() != nil)
	}
	ids := make([]string, 37) // 32 + 4 + 1
	for i := range ids {
		ids[i] = "a" + strconv.Itoa(i)
	}
	publish(t, tr, "q", ids...)
	if got := preparedSizes(st.insertPart); !reflect.DeepEqual(got, []int{1, 4, 32}) || st.insertFull.st.Load() != nil {
		t.Errorf("after a publish of 37: insert sizes %v (full %v), want [1 4 32]", got, st.insertFull.st.Load() != nil)
	}
	ds := receive(t, tr, transport.ReceiveParams{Max: 5})
	if got := preparedSizes(st.lease); !reflect.DeepEqual(got, []int{1, 2, 4, 8}) {
		t.Errorf("after a receive of at most 5: lease sizes %v, want [1 2 4 8]", got)
	}
	if n := st.unprepared.Load(); n != 0 {
		t.Errorf("%d statements parsed in a transaction, want 0", n)
	}

	// PublishTx of 3 (2 + 1) in the caller's transaction: size 2 is new.
	publishTx := func(ids ...string) {
		t.Helper()
		tx, err := tr.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		msgs := make([]transport.Message, len(ids))
		for i, id := range ids {
			msgs[i] = transport.Message{EventID: id, Body: []byte("body-" + id)}
		}
		if err := tr.PublishTx(ctx, tx, &transport.PublishParams{Queue: "q", Messages: msgs}); err != nil {
			t.Fatalf("PublishTx: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	publishTx("b0", "b1", "b2")
	if n := st.unprepared.Load(); n != 1 {
		t.Errorf("PublishTx of 3: %d statements parsed in its transaction, want 1 (size 2)", n)
	}
	waittest.For(t, "the writer to prepare the insert of 2 rows", func() bool { return st.insertPart[1].st.Load() != nil })
	publishTx("c0", "c1")
	if n := st.unprepared.Load(); n != 1 {
		t.Errorf("second PublishTx of 2: %d statements parsed in transactions, want still 1", n)
	}
	rest := receive(t, tr, transport.ReceiveParams{Max: 100})
	if len(ds)+len(rest) != 42 {
		t.Errorf("received %d + %d, want 42", len(ds), len(rest))
	}
	conserved(t, tr, "q", append(ds, rest...)...)
}
