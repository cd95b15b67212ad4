package effecttest

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// CheckExactlyOnce checks a kill loop's outcome: kills in 1..the number of
// killer bodies (each kills at most once, after the commit that applied
// it; fewer when two commit at once and one kill takes both down); one
// effect per body — the bodies sent, each once, amounts summing to
// wantAmount — and one outbox row per effect; and, from the children's
// delivery log, one event ID per body, of the expected form (idOK), the
// same on every delivery: in particular every body killed after its commit
// came back with that ID and was found applied.
func CheckExactlyOnce(t *testing.T, app *sql.DB, logPath string, kills int, bodies [][]byte, wantAmount int64, idOK func(string) bool) {
	t.Helper()
	n := len(bodies)
	killers := 0
	for _, b := range bodies {
		if Killer(b) {
			killers++
		}
	}
	if kills == 0 || kills > killers {
		t.Fatalf("%d kills, want 1..%d (one per selected message at most)", kills, killers)
	}
	var total, distinctIDs, distinctBodies int
	var sum int64
	if err := app.QueryRow(`SELECT COUNT(*), COUNT(DISTINCT event_id), COUNT(DISTINCT body), CAST(COALESCE(SUM(amount), 0) AS BIGINT) FROM effects`).
		Scan(&total, &distinctIDs, &distinctBodies, &sum); err != nil {
		t.Fatal(err)
	}
	if total != n || distinctIDs != n || distinctBodies != n || sum != wantAmount {
		t.Fatalf("effects %d (%d event IDs, %d bodies, amount %d), want %d exactly once each (amount %d)",
			total, distinctIDs, distinctBodies, sum, n, wantAmount)
	}
	for _, b := range bodies {
		var c int
		if err := app.QueryRow(`SELECT COUNT(*) FROM effects WHERE body = $1`, string(b)).Scan(&c); err != nil {
			t.Fatal(err)
		}
		if c != 1 {
			t.Fatalf("body %q applied %d times, want once", b, c)
		}
	}
	var receipts int
	if err := app.QueryRow(`SELECT COUNT(*) FROM lily_outbox`).Scan(&receipts); err != nil {
		t.Fatal(err)
	}
	if receipts != n {
		t.Fatalf("%d outbox rows, want %d (one per effect)", receipts, n)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	idOf := map[string]string{}      // body → the event ID of its deliveries
	killedAt := map[string]int{}     // body → its kill's line
	redelivered := map[string]bool{} // killed body → found applied after its kill
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Split(line, "\t")
		switch {
		case len(f) == 3 && f[0] == "kill":
			killedAt[f[1]] = i
		case len(f) == 5 && f[0] == "delivery":
			body, id, applied := f[1], f[2], f[4] == "true"
			if prev, ok := idOf[body]; ok && prev != id {
				t.Fatalf("body %s delivered with event ID %s, earlier with %s: the ID changed", body, id, prev)
			}
			idOf[body] = id
			if _, killed := killedAt[body]; killed && !applied {
				redelivered[body] = true
			}
		default:
			t.Fatalf("delivery log line %d: %q", i+1, line)
		}
	}
	seen := map[string]bool{}
	for body, id := range idOf {
		if !idOK(id) || seen[id] {
			t.Fatalf("body %s has event ID %q: not of the expected form, or shared", body, id)
		}
		seen[id] = true
	}
	if len(idOf) != n {
		t.Fatalf("%d bodies delivered, want %d", len(idOf), n)
	}
	if len(killedAt) < kills {
		t.Fatalf("%d kills logged, %d happened", len(killedAt), kills)
	}
	for body := range killedAt {
		if !redelivered[body] {
			t.Fatalf("body %s was killed after its commit and never came back found applied under ID %s", body, idOf[body])
		}
	}
	t.Logf("%d messages, %d kills; %d killed messages redelivered with their first event ID and found applied; %d effects",
		n, kills, len(redelivered), total)
}

// CheckLedger checks queue's row of cat's ledger, with in-flight counted
// by inflight: n accepted, n acked, nothing dead-lettered, in flight or
// lost.
func CheckLedger(t *testing.T, cat *catalog.Store, inflight transport.InFlightCounter, queue string, n int64) {
	t.Helper()
	rows, err := ledger.New(cat).Rows(context.Background(), inflight)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Queue != queue {
			continue
		}
		if r.Lost != 0 || r.InFlight != 0 || r.DeadLettered != 0 || r.Accepted != n || r.Acked != n {
			t.Fatalf("ledger %+v: want %d accepted and acked, none lost\n%s", r, n, transporttest.ExplainLedger(context.Background(), cat, inflight, r))
		}
		t.Logf("ledger of %s: accepted %d = acked %d, lost %d", queue, r.Accepted, r.Acked, r.Lost)
		return
	}
	t.Fatalf("no ledger row for %s: %+v", queue, rows)
}
