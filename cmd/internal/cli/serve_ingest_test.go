package cli

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ingest"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// served is one 'lily serve' run in the test's process.
type served struct {
	base      string // http(s)://127.0.0.1:PORT
	out, errb *transporttest.SyncBuffer
	cancel    context.CancelFunc
	done      chan int
	stopped   bool
}

// serveProcess runs 'lily serve args...' until stop or the end of the
// test; it waits until the server printed its address.
func serveProcess(t *testing.T, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{out: &transporttest.SyncBuffer{}, errb: &transporttest.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() { s.done <- Run(ctx, append([]string{"serve"}, args...), s.out, s.errb) }()
	t.Cleanup(func() { s.stop(t) })
	m := awaitAddress(t, s.out, s.errb, s.done)
	s.base = m[1] + "://127.0.0.1:" + m[3]
	return s
}

// stop interrupts the server and checks that it stopped cleanly.
func (s *served) stop(t *testing.T) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	s.cancel()
	if code := <-s.done; code != 0 {
		t.Errorf("serve exited %d: %s", code, s.errb.String())
	}
	if !strings.Contains(s.out.String(), "lily serve: stopped") {
		t.Errorf("serve did not stop cleanly: %q", s.out.String())
	}
}

// holder is the lease holder name the server printed.
func (s *served) holder(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`holder (\S+)\)`).FindStringSubmatch(s.out.String())
	if m == nil {
		t.Fatalf("serve printed no ingest holder: %q", s.out.String())
	}
	return m[1]
}

// metric returns the value of one series on the server's /metrics, 0
// when it is absent.
func (s *served) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// waitMetric waits until a series reaches want (a counter is counted
// just after the catalog commit the test saw) and returns its value then,
// or its last value once waittest.DefaultLimit passed: the caller says
// what a wrong value means.
func (s *served) waitMetric(t *testing.T, series string, want float64) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waittest.DefaultLimit)
	defer cancel()
	var got float64
	waittest.Poller{}.Poll(ctx, func() (bool, string) {
		got = s.metric(t, series)
		return got == want, ""
	})
	return got
}

// brokerQueue declares a quorum queue with delivery_limit 2 under a
// random name and returns its configuration file and a transport on it.
func brokerQueue(t *testing.T, url string) (lily.QueueConfig, string, *rabbitmq.Transport) {
	t.Helper()
	ctx := context.Background()
	queue := fmt.Sprintf("serveingest%08x.created", rand.Uint32())
	qc := lily.QueueConfig{Name: queue, Transport: lily.TransportRabbitMQ, DeliveryLimit: new(2)}.WithDefaults()
	cleanupRabbitQueues(t, url, qc)
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf("rabbitmq_url = %q\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\ndelivery_limit = 2\n", url, queue))
	return qc, cfg, tr
}

// brokerDeadLetter makes n dead letters the broker makes by itself: it
// publishes n messages and gives each back (a consumer crashing on it)
// until RabbitMQ dead-letters it at the delivery limit — exactly
// delivery_limit deliveries each, so 2n releases. seq numbers the event
// IDs.
func brokerDeadLetter(t *testing.T, tr *rabbitmq.Transport, qc lily.QueueConfig, seq, n int) {
	t.Helper()
	ctx := context.Background()
	var msgs []lily.Message
	for i := range n {
		msgs = append(msgs, lily.Message{EventID: fmt.Sprintf("evt-%d", seq+i), Body: []byte(fmt.Sprintf(`{"n":%d}`, seq+i))})
	}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	const consumer = "crasher"
	releases, want := 0, n*(*qc.DeliveryLimit)
	waittest.ForState(t, fmt.Sprintf("the broker to dead-letter %d messages at the delivery limit", n), func() (bool, string) {
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 16, Wait: 50 * time.Millisecond, Consumer: consumer})
		if err != nil {
			t.Fatal(err)
		}
		var ss []transport.Settlement
		for _, d := range ds {
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Release})
		}
		if len(ss) > 0 {
			if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
				t.Fatal(err)
			}
		}
		releases += len(ss)
		return releases >= want, fmt.Sprintf("%d of %d releases", releases, want)
	})
	if err := tr.StopConsumer(ctx, &transport.StopParams{Queue: qc.Name, Consumer: consumer}); err != nil {
		t.Fatal(err)
	}
}

// newCatalogFile creates an empty catalog file for --db.
func newCatalogFile(t *testing.T) (string, *catalog.Store) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "catalog.db")
	cat, err := catalog.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return db, cat
}

// replicaCatalog creates an empty catalog for replicas to share: a SQLite
// file, or a PostgreSQL schema; it returns the flag that names it.
func replicaCatalog(t *testing.T, kind string) ([]string, *catalog.Store) {
	t.Helper()
	if kind == "sqlite" {
		db, cat := newCatalogFile(t)
		return []string{"--db", db}, cat
	}
	url := pgtest.URL(t)
	cat, err := catalog.OpenPostgres(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return []string{"--catalog", url}, cat
}

// waitEntries waits until queue has want entries in the catalog, and
// checks that none is doubled. state, if given, adds to what a timeout
// reports.
func waitEntries(t *testing.T, cat *catalog.Store, queue string, want int, state ...func() string) {
	t.Helper()
	waittest.ForState(t, fmt.Sprintf("%d entries of %s in the catalog", want, queue), func() (bool, string) {
		n, distinct := catalogtest.Entries(t, cat, queue)
		if n > want || distinct != n {
			t.Fatalf("catalog holds %d entries (%d distinct event IDs) of %s, want %d dead letters made", n, distinct, queue, want)
		}
		got := fmt.Sprintf("%d entries", n)
		for _, f := range state {
			got += ", " + f()
		}
		return n == want, got
	})
}

// TestServeIngestsBrokerDeadLetters: dead letters RabbitMQ makes by itself
// (delivery limit) reach the catalog, the inflow metric and the entries
// gauge while 'lily serve' runs, without 'lily dlq ingest'.
func TestServeIngestsBrokerDeadLetters(t *testing.T) {
	t.Parallel() // without API tokens: TestMain unsets LILY_TOKENS
	url := needRabbit(t)
	qc, cfg, tr := brokerQueue(t, url)
	db, cat := newCatalogFile(t)
	brokerDeadLetter(t, tr, qc, 0, 3) // waiting in the DLQ before the server starts
	idle := serveProcess(t, "--config", cfg, "--db", db, "--listen", "127.0.0.1:0", "--no-ingest")
	if got := idle.waitMetric(t, fmt.Sprintf(`lily_broker_dlq_messages{queue=%q}`, qc.Name), 3); got != 3 { // the broker read may come a scrape later
		t.Errorf("--no-ingest: lily_broker_dlq_messages = %g, want the 3 dead letters in the broker", got)
	}
	idle.stop(t)
	if n, _ := catalogtest.Entries(t, cat, qc.Name); n != 0 {
		t.Fatalf("--no-ingest ingested %d", n)
	}
	s := serveProcess(t, "--config", cfg, "--db", db, "--listen", "127.0.0.1:0", "--ingest-interval", "50ms", "--ingest-lease-ttl", "2s")
	waitEntries(t, cat, qc.Name, 3)
	brokerDeadLetter(t, tr, qc, 3, 2) // made while it runs
	waitEntries(t, cat, qc.Name, 5)

	if n, err := tr.DeadLetterDepth(context.Background(), qc.Name); err != nil || n != 0 {
		t.Errorf("the broker DLQ still holds %d (%v) after the ingest", n, err)
	}
	q := fmt.Sprintf(`{queue=%q}`, qc.Name)
	for series, want := range map[string]float64{
		`lily_dlq_inflow_total{queue="` + qc.Name + `",reason="delivery_limit"}`: 5,
		`lily_dlq_entries{queue="` + qc.Name + `",state="pending"}`:              5,
		"lily_ingest_total" + q:        5,
		"lily_ingest_lease_held" + q:   1,
		"lily_ingest_errors_total" + q: 0,
		"lily_broker_dlq_messages" + q: 0,
	} {
		if got := s.waitMetric(t, series, want); got != want {
			t.Errorf("%s = %g, want %g", series, got, want)
		}
	}
	if s.metric(t, "lily_ingest_last_success_timestamp_seconds"+q) == 0 {
		t.Error("lily_ingest_last_success_timestamp_seconds not set")
	}
	if h := catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name); h != s.holder(t) {
		t.Errorf("lease holder %q, want the server's %q", h, s.holder(t))
	}
	for _, want := range []string{"ingest: lease taken", "ingest: drained dead letters into the catalog", "queue=" + qc.Name, "broker_made="} {
		if !strings.Contains(s.errb.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, s.errb.String())
		}
	}
	s.stop(t)
	if h := catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name); h != "" {
		t.Errorf("lease still held by %q after the server stopped", h)
	}
	if !strings.Contains(s.errb.String(), "ingest: lease released") {
		t.Errorf("the log does not say the lease was released:\n%s", s.errb.String())
	}
}

// TestServeReplicasDrainOneAtATime runs two servers on one catalog file:
// one holds the queue's lease and drains, the other drains nothing; when
// the holder stops, the other takes over. Every dead letter is in the
// catalog once, and the two servers drained as many as were made.
func TestServeReplicasDrainOneAtATime(t *testing.T) {
	t.Parallel() // without API tokens: TestMain unsets LILY_TOKENS
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) { replicasDrainOneAtATime(t, kind) })
	}
}

func replicasDrainOneAtATime(t *testing.T, kind string) {
	url := needRabbit(t)
	qc, cfg, tr := brokerQueue(t, url)
	store, cat := replicaCatalog(t, kind)
	// The default lease (30 s): the holder keeps it through the three
	// rounds as long as it renews within that, which a 2 s lease did not
	// survive on a loaded machine (a replica starved for 2 s lost it to the
	// other — a handover by design, not what this test is about). The
	// takeover below follows the holder's release at its stop, not expiry.
	args := append([]string{"--config", cfg, "--listen", "127.0.0.1:0", "--ingest-interval", "50ms"}, store...)
	a, b := serveProcess(t, args...), serveProcess(t, args...)
	defer func() {
		if t.Failed() { // the two servers' logs explain a takeover that did not happen
			t.Logf("--- server a ---\n%s\n--- server b ---\n%s", a.errb.String(), b.errb.String())
		}
	}()
	made := 0
	for round := range 3 {
		brokerDeadLetter(t, tr, qc, made, 4)
		made += 4
		waitEntries(t, cat, qc.Name, made)
		t.Logf("round %d: %d dead letters in the catalog", round, made)
	}
	first, second := a, b
	if catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name) == b.holder(t) {
		first, second = b, a
	}
	if h := catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name); h != first.holder(t) {
		t.Fatalf("lease holder %q is neither server (%q, %q)", h, a.holder(t), b.holder(t))
	}
	q := fmt.Sprintf(`{queue=%q}`, qc.Name)
	if got := first.waitMetric(t, "lily_ingest_total"+q, float64(made)); got != float64(made) {
		t.Errorf("the lease holder drained %g, want all %d\n--- first ---\n%s\n--- second ---\n%s", got, made, first.errb.String(), second.errb.String())
	}
	if got, held := second.metric(t, "lily_ingest_total"+q), second.metric(t, "lily_ingest_lease_held"+q); got != 0 || held != 0 {
		t.Errorf("the other replica drained %g (lease held %g) while the first held the lease; want 0", got, held)
	}
	// The holder stops (releasing its lease): the other takes over.
	firstDrained := first.metric(t, "lily_ingest_total"+q)
	first.stop(t)
	brokerDeadLetter(t, tr, qc, made, 5)
	made += 5
	waitEntries(t, cat, qc.Name, made, func() string { // the other replica drains
		return fmt.Sprintf("lease holder %q (the other replica is %q)", catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name), second.holder(t))
	})
	if h := catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name); h != second.holder(t) {
		t.Errorf("after the holder stopped the lease is %q, want the other replica %q", h, second.holder(t))
	}
	if got := second.waitMetric(t, "lily_ingest_total"+q, float64(made)-firstDrained); firstDrained+got != float64(made) {
		t.Errorf("drained %g + %g, want the %d dead letters made, each once", firstDrained, got, made)
	}
	if n, distinct := catalogtest.Entries(t, cat, qc.Name); n != made || distinct != made {
		t.Errorf("catalog holds %d entries (%d distinct), want %d", n, distinct, made)
	}
}

// TestServeTakesOverADeadReplicasLease: a replica that died leaves its
// lease behind, unrenewed; another takes over once it expires, and
// nothing is ingested before. In parallel, as TestServeKilledMidJob.
func TestServeTakesOverADeadReplicasLease(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	qc, cfg, tr := brokerQueue(t, url)
	db, cat := newCatalogFile(t)
	const ttl = 3 * time.Second
	brokerDeadLetter(t, tr, qc, 0, 3)
	dead := "dead-host/1/0000000000000000"
	if ok, err := cat.TakeLease(context.Background(), ingest.LeasePrefix+qc.Name, dead, ttl, time.Now()); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ls, _ := cat.Leases(context.Background(), ingest.LeasePrefix+qc.Name)
	expired := ls[0].Expires
	s := serveProcess(t, "--config", cfg, "--db", db, "--listen", "127.0.0.1:0", "--ingest-interval", "50ms", "--ingest-lease-ttl", ttl.String())
	startedBefore := time.Now().Before(expired)
	waitEntries(t, cat, qc.Name, 3)
	if h := catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name); h != s.holder(t) {
		t.Errorf("lease holder %q, want the live server %q", h, s.holder(t))
	}
	var firstAt int64
	if err := cat.DB().QueryRow(`SELECT MIN(updated_at) FROM lily_dlq_entries WHERE queue = ?`, qc.Name).Scan(&firstAt); err != nil {
		t.Fatal(err)
	}
	if time.UnixMilli(firstAt).Before(expired) {
		t.Errorf("an entry was ingested at %s, before the dead replica's lease expired at %s", time.UnixMilli(firstAt).UTC(), expired)
	}
	if startedBefore && !strings.Contains(s.errb.String(), "ingest: lease held by another replica") {
		t.Errorf("the log does not say another replica held the lease first:\n%s", s.errb.String())
	}
}

func TestServeIngestFlags(t *testing.T) {
	t.Parallel() // without API tokens: TestMain unsets LILY_TOKENS
	db := seedDLQ(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ingest-interval", "1ms"}, "--ingest-interval 1ms: must be at least 10ms"},
		{[]string{"--ingest-interval", "10s", "--ingest-lease-ttl", "15s"}, "--ingest-lease-ttl 15s: must be at least twice --ingest-interval 10s"},
		{[]string{"--tls-cert", "cert.pem"}, "--tls-cert and --tls-key go together"},
	} {
		code, _, stderr := run(t, append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
	// --no-ingest: no loop (and no broker queue here anyway).
	s := serveProcess(t, "--db", db, "--listen", "127.0.0.1:0", "--no-ingest")
	if strings.Contains(s.out.String(), "ingesting") {
		t.Errorf("--no-ingest: %q", s.out.String())
	}
}

// serveChild starts 'lily serve args...' in a child process and waits
// until it printed its ingest lease holder.
func serveChild(t *testing.T, args ...string) *child {
	t.Helper()
	c := lilyChild(t, append([]string{"serve"}, args...)...)
	re := regexp.MustCompile(`holder (\S+)\)`)
	waittest.Poller{Limit: time.Minute}.For(t, "the serve child to print its ingest holder", func() (bool, string) {
		m := re.FindStringSubmatch(c.out.String())
		if m != nil {
			c.holder = m[1]
		}
		return m != nil, fmt.Sprintf("stdout %q, stderr %q", c.out.String(), c.errb.String())
	})
	return c
}

// TestServeReplicaKilledHandsOver runs two 'lily serve' processes on one
// catalog file and kills the lease holder with SIGKILL (no release): the
// other takes the lease over once it expired and drains what the broker
// dead-letters since; every dead letter is in the catalog once.
//
// In parallel, as TestServeKilledMidJob: everything it uses is its own.
func TestServeReplicaKilledHandsOver(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			replicaKilledHandsOver(t, kind)
		})
	}
}

func replicaKilledHandsOver(t *testing.T, kind string) {
	url := needRabbit(t)
	qc, cfg, tr := brokerQueue(t, url)
	store, cat := replicaCatalog(t, kind)
	args := append([]string{"--config", cfg, "--listen", "127.0.0.1:0", "--ingest-interval", "50ms", "--ingest-lease-ttl", "2s"}, store...)
	a, b := serveChild(t, args...), serveChild(t, args...)
	brokerDeadLetter(t, tr, qc, 0, 4)
	waitEntries(t, cat, qc.Name, 4)
	holder, other := a, b
	if catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name) == b.holder {
		holder, other = b, a
	}
	if h := catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name); h != holder.holder {
		t.Fatalf("lease holder %q is neither child (%q, %q)", h, a.holder, b.holder)
	}
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	holder.cmd.Wait()
	ls, err := cat.Leases(context.Background(), ingest.LeasePrefix+qc.Name)
	if err != nil || len(ls) != 1 || ls[0].Holder != holder.holder {
		t.Fatalf("after SIGKILL the lease is %+v (%v), want the dead holder's, unreleased", ls, err)
	}
	expires := ls[0].Expires
	brokerDeadLetter(t, tr, qc, 4, 4)
	waitEntries(t, cat, qc.Name, 8)
	if h := catalogtest.LeaseHolder(t, cat, ingest.LeasePrefix+qc.Name); h != other.holder {
		t.Errorf("lease holder %q after the kill, want the surviving child %q", h, other.holder)
	}
	var firstAt time.Time
	if err := cat.Each(context.Background(), catalog.Filter{Queue: qc.Name, EventIDs: []string{"evt-4", "evt-5", "evt-6", "evt-7"}}, func(e *catalog.Entry) error {
		if firstAt.IsZero() || e.UpdatedAt.Before(firstAt) {
			firstAt = e.UpdatedAt
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if firstAt.Before(expires.Truncate(time.Millisecond)) {
		t.Errorf("the survivor ingested at %s, before the killed holder's lease expired at %s", firstAt, expires)
	}
	if !strings.Contains(other.errb.String(), "ingest: lease taken") {
		t.Errorf("the survivor's log does not say it took the lease:\n%s", other.errb.String())
	}
	if n, err := tr.DeadLetterDepth(context.Background(), qc.Name); err != nil || n != 0 {
		t.Errorf("the broker DLQ holds %d (%v), want 0", n, err)
	}
}
