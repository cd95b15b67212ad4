package cli

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestRelayMetrics runs 'lily relay --metrics' over an outbox with rows
// for two queues, one of which the store refuses (it was never declared):
// /metrics shows the confirmed rows of the one, the failed publishes, the
// pending and failing rows and the age of the oldest row of the other,
// and zero for a configured queue with nothing in the outbox; the rows
// that were confirmed reach the queue, the others stay in the outbox.
func TestRelayMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// payments.captured is configured but not declared in the store: every
	// publish to it fails.
	cfg, tr, appPath, app := relayFixture(t, []string{"orders.created", "payments.captured", "quiet.queue"}, "orders.created")
	tx, err := app.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range 5 {
		q := "orders.created"
		if i >= 3 {
			q = "payments.captured"
		}
		msgs = append(msgs, outbox.Message{Queue: q, Message: lily.Message{Body: []byte{byte('a' + i)}}})
	}
	if err := outbox.Add(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithCancel(ctx)
	var out, errb transporttest.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(rctx, []string{"relay", "--config", cfg, "--outbox", appPath, "--metrics", "127.0.0.1:0", "--poll", "20ms"}, &out, &errb)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("relay exited %d: %s", code, errb.String())
		}
	}()
	addr := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	want := []string{
		`lily_outbox_published_total{queue="orders.created"} 3`,
		`lily_outbox_published_total{queue="payments.captured"} 0`,
		`lily_outbox_pending{queue="orders.created"} 0`,
		`lily_outbox_pending{queue="payments.captured"} 2`,
		`lily_outbox_failing{queue="payments.captured"} 2`,
		`lily_outbox_pending{queue="quiet.queue"} 0`,
		`lily_outbox_oldest_pending_age_seconds{queue="quiet.queue"} 0`,
		`lily_outbox_relay_errors_total 0`,
		`lily_outbox_up 1`,
	}
	failures := regexp.MustCompile(`lily_outbox_publish_failures_total\{queue="payments.captured"\} (\d+)`)
	age := regexp.MustCompile(`lily_outbox_oldest_pending_age_seconds\{queue="payments.captured"\} ([0-9.e+-]+)`)
	var body string
	defer func() {
		if t.Failed() {
			t.Logf("last scrape:\n%s\nstderr: %s", body, errb.String())
		}
	}()
	waittest.For(t, "the relay's metrics", func() bool {
		m := addr.FindStringSubmatch(out.String())
		if m == nil {
			return false
		}
		resp, err := http.Get(m[1])
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false
			}
		}
		f := failures.FindStringSubmatch(body)
		a := age.FindStringSubmatch(body)
		return f != nil && f[1] != "0" && f[1] != "1" && a != nil && a[1] != "0"
	})
	// The confirmed rows are in the queue; the refused ones wait in the outbox.
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "orders.created", Max: 10, Wait: time.Second, Consumer: "t"})
	if err != nil || len(ds) != 3 {
		t.Fatalf("received %d (%v), want the 3 confirmed rows", len(ds), err)
	}
	bs, err := outbox.Backlog(ctx, app)
	if err != nil || len(bs) != 1 || bs[0].Queue != "payments.captured" || bs[0].Pending != 2 {
		t.Fatalf("backlog %+v (%v), want payments.captured: 2 pending", bs, err)
	}
}

// TestAlertsOutboxRules: with outbox_url configured, 'lily alerts' writes
// LilyOutboxStalled and LilyOutboxMetricsAbsent for every queue; promtool
// fires the first when the oldest unpublished row grows past --outbox-age
// (and not while a relay keeps the backlog young), the second when no
// relay exports the queue's metrics. Without outbox_url neither is written.
func TestAlertsOutboxRules(t *testing.T) {
	promtool := needPromtool(t)
	path := writeConfig(t, "outbox_url = \"app.db\"\n\n[[queue]]\nname = \"orders.created\"\nowner = \"team-checkout\"\n")
	rulesFile, rf := checkedRules(t, promtool, path, alertOptions{config: path, spikeFactor: 3, spikeMin: 10, breakerFor: 15 * time.Minute,
		keyHeldFor: 10 * time.Minute, brokerFor: 5 * time.Minute, outboxAge: 10 * time.Minute, outbox: true}, "--outbox-age", "10m")
	expect := func(alert string, value string) promExpAlerts {
		for _, r := range rf.Groups[0].Rules {
			if r.Alert == alert {
				return promExpAlerts{
					ExpLabels: map[string]string{"severity": r.Labels.Severity, "queue": "orders.created", "owner": "team-checkout"},
					ExpAnnotations: map[string]string{"summary": strings.Replace(r.Annotations.Summary, "{{ $value | humanizeDuration }}", value, 1),
						"description": r.Annotations.Description, "runbook": r.Annotations.Runbook},
				}
			}
		}
		t.Fatalf("no %s rule", alert)
		return promExpAlerts{}
	}
	none := []promExpAlerts{}
	tests := []promTest{
		{ // the relay stops at 2m: the oldest row ages by a minute a scrape
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_outbox_oldest_pending_age_seconds{queue="orders.created",instance="relay"}`, "0 1 0+60x20"},
				{`lily_outbox_pending{queue="orders.created",instance="relay"}`, "0 3 3x20"},
			},
			AlertTests: []promAlertTest{
				{"10m", "LilyOutboxStalled", none},
				{"13m", "LilyOutboxStalled", []promExpAlerts{expect("LilyOutboxStalled", "11m 0s")}},
				{"13m", "LilyOutboxMetricsAbsent", none},
			},
		},
		{ // a busy outbox that the relay keeps young; then no relay exports
			Interval: "1m",
			InputSeries: []promSeries{
				{`lily_outbox_oldest_pending_age_seconds{queue="orders.created"}`, "2x10"},
				{`lily_outbox_pending{queue="orders.created"}`, "50x10"},
			},
			AlertTests: []promAlertTest{
				{"9m", "LilyOutboxStalled", none},
				{"25m", "LilyOutboxMetricsAbsent", none}, // absent since 15m (the last sample at 10m, then 5m of staleness), pending for 15m
				{"35m", "LilyOutboxMetricsAbsent", []promExpAlerts{{
					ExpLabels:      expect("LilyOutboxMetricsAbsent", "").ExpLabels,
					ExpAnnotations: expect("LilyOutboxMetricsAbsent", "").ExpAnnotations,
				}}},
			},
		},
	}
	promtoolTest(t, promtool, rulesFile, "lily-outbox-rules.test.yml", tests)

	// Without an outbox in the configuration: no outbox rules.
	plain := writeConfig(t, "[[queue]]\nname = \"orders.created\"\n")
	code, out, stderr := run(t, "alerts", "--config", plain)
	if code != 0 || strings.Contains(out, "LilyOutbox") {
		t.Errorf("alerts without outbox_url: exit %d, outbox rules present %v\n%s", code, strings.Contains(out, "LilyOutbox"), stderr)
	}
	if code, _, stderr := run(t, "alerts", "--config", path, "--outbox-age", "30s"); code != 2 || !strings.Contains(stderr, "--outbox-age 30s") {
		t.Errorf("--outbox-age 30s: exit %d %s, want 2 naming the flag", code, stderr)
	}
}
