package lilyprom_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// lily_dlq_alarming_entries leaves out the held entries of a known_issue
// group, on both catalog stores: a new fingerprint still counts.
func TestCatalogAlarmingEntries(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := transporttest.TempCatalog(t)
			if kind == "postgres" {
				var err error
				if s, err = catalog.OpenPostgres(ctx, pgtest.URL(t)); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
			}
			msg := func(id, m string) *catalog.Entry {
				h := transport.Headers{}
				evidence.Record{Reason: evidence.ReasonPermanent, ErrorMessage: m, DeadLetteredAt: testNow}.Apply(h)
				return catalog.NewEntry("orders.created", transport.Message{EventID: id, Body: []byte(id)}, h, "", testNow)
			}
			if err := s.Insert(ctx, msg("a1", "order 1 not found"), msg("a2", "order 2 not found"), msg("b1", "tax service down")); err != nil {
				t.Fatal(err)
			}
			known := catalog.TriageKnownIssue
			if _, err := s.TriageGroup(ctx, catalog.TriageGroupParams{Queue: "orders.created", Fingerprint: evidence.Fingerprint("order 1 not found"),
				Change: catalog.TriageChange{Status: &known}}); err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(lilyprom.NewCatalogCollector(s, nil, lilyprom.CatalogOptions{}))
			want := `# HELP lily_dlq_alarming_entries Held dead-letter entries (pending, parked, needs_manual) not triaged known_issue (their own status, else their group's): what LilyDLQNotEmpty alarms on.
# TYPE lily_dlq_alarming_entries gauge
lily_dlq_alarming_entries{queue="orders.created"} 1
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), lilyprom.MetricDLQAlarming); err != nil {
				t.Error(err)
			}
		})
	}
}
