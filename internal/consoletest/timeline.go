package consoletest

import (
	"context"
	"fmt"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// TimelineNow is the clock of the timeline tests (httpapi.Options.Now):
// far from the fixture's own dead letters (dead-lettered at the real
// time), so that only what SeedTimeline adds falls in its windows.
var TimelineNow = time.Date(2030, 1, 2, 10, 30, 0, 0, time.UTC)

// SeedTimeline adds what the timeline charts count, at known times around
// TimelineNow. With window 24h and 1h buckets the span is 2030-01-01T11:00Z
// to 2030-01-02T11:00Z, bucket i starting at 11:00 + i hours:
//
//   - orders.created dead letters: 1 at 01-01 11:00 (bucket 0, the start
//     is in), 2 at 01-02 09:59:59.999 (bucket 22), 3 at 01-02 10:10
//     (bucket 23), and 1 at 01-01 10:59:59.999 (before the span);
//   - payments.captured dead letters: 2 at 01-02 10:25 (bucket 23) and 1 at
//     01-02 11:00 (the span's end is out);
//   - redriven (orders.created): the 11:00 one at 01-01 23:30 (bucket 12),
//     both 09:59:59.999 ones at 01-02 10:05 (bucket 23), one of which is
//     erased at 10:06 (left out);
//   - ledger rows: orders.created acked 1 at 01-02 00:00 (bucket 13) and 4
//     at 10:30 (bucket 23), accepted 2 at 10:59:59 (bucket 23);
//     payments.captured acked 1 at 01-01 11:30 (bucket 0).
func (f *Fixture) SeedTimeline() {
	f.T.Helper()
	ctx := context.Background()
	day1 := func(h, m int) time.Time { return time.Date(2030, 1, 1, h, m, 0, 0, time.UTC) }
	day2 := func(h, m int) time.Time { return time.Date(2030, 1, 2, h, m, 0, 0, time.UTC) }
	justBefore := func(t time.Time) time.Time { return t.Add(-time.Millisecond) }
	var es []*catalog.Entry
	ids := map[string][]string{}
	add := func(name, queue string, n int, at time.Time) {
		for i := range n {
			id := fmt.Sprintf("timeline-%s-%d", name, i)
			ids[name] = append(ids[name], id)
			es = append(es, catalog.NewEntry(queue, transport.Message{EventID: id, Body: []byte(`{"n":` + fmt.Sprint(i) + `}`)},
				transport.Headers{}, "permanent", at))
		}
	}
	add("start", "orders.created", 1, day1(11, 0))
	add("b22", "orders.created", 2, justBefore(day2(10, 0)))
	add("b23", "orders.created", 3, day2(10, 10))
	add("before", "orders.created", 1, justBefore(day1(11, 0)))
	add("pay", "payments.captured", 2, day2(10, 25))
	add("end", "payments.captured", 1, day2(11, 0))
	if err := f.Catalog.Insert(ctx, es...); err != nil {
		f.T.Fatal(err)
	}
	rd := redrive.New(f.Catalog)
	for _, r := range []struct {
		name string
		at   time.Time
	}{{"start", day1(23, 30)}, {"b22", day2(10, 5)}} {
		res, err := rd.Redrive(ctx, redrive.Params{Filter: catalog.Filter{EventIDs: ids[r.name]}, Target: f.Target, Now: func() time.Time { return r.at }})
		if err != nil || res.Redriven != len(ids[r.name]) {
			f.T.Fatalf("redrive %s: %+v, %v", r.name, res, err)
		}
	}
	if _, err := f.Catalog.Erase(ctx, catalog.DecideParams{Filter: catalog.Filter{EventIDs: ids["b22"][:1]}, Now: func() time.Time { return day2(10, 6) }}); err != nil {
		f.T.Fatal(err)
	}
	db := catalogdb.Of(f.Catalog)
	for i, row := range []struct {
		queue, kind string
		n           int
		at          time.Time
	}{
		{"orders.created", "acked", 1, day2(0, 0)}, {"orders.created", "acked", 4, day2(10, 30)},
		{"orders.created", "accepted", 2, day2(10, 59).Add(59 * time.Second)}, {"payments.captured", "acked", 1, day1(11, 30)},
	} {
		for j := range row.n {
			if _, err := db.ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES (?, ?, ?, ?)`,
				row.queue, row.kind, fmt.Sprintf("timeline-ledger-%d-%d", i, j), row.at.UnixMilli()); err != nil {
				f.T.Fatal(err)
			}
		}
	}
}
