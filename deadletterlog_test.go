package lily

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestDeadLetterLogRateLimit: at most deadLetterLogBurst lines a second,
// the rest summed up per reason in the next window and at the end; every
// dead letter is accounted for. At Debug every one is logged.
func TestDeadLetterLogRateLimit(t *testing.T) {
	var buf bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&buf, nil))
	var l deadLetterLog
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 25 {
		reason := "permanent"
		if i%5 == 0 {
			reason = "retries_exhausted"
		}
		l.log(lg, t0.Add(time.Duration(i)*time.Millisecond), "e", reason, "boom")
	}
	if got := strings.Count(buf.String(), "msg=dead-lettered "); got != deadLetterLogBurst {
		t.Fatalf("%d lines in the first second, want %d:\n%s", got, deadLetterLogBurst, buf.String())
	}
	l.log(lg, t0.Add(1500*time.Millisecond), "e", "permanent", "boom") // next window: summary, then the line
	out := buf.String()
	// 25 in the first second: 10 logged; of the 15 others 3 are retries_exhausted (i = 10, 15, 20).
	for _, want := range []string{"reason=permanent count=12", "reason=retries_exhausted count=3"} {
		if !strings.Contains(out, want) {
			t.Errorf("no summary %q in:\n%s", want, out)
		}
	}
	if got := strings.Count(out, "msg=dead-lettered "); got != deadLetterLogBurst+1 {
		t.Errorf("%d single lines, want %d", got, deadLetterLogBurst+1)
	}
	for range deadLetterLogBurst + 2 {
		l.log(lg, t0.Add(1600*time.Millisecond), "e", "delivery_limit", "boom")
	}
	l.flush(lg)
	if !strings.Contains(buf.String(), "reason=delivery_limit count=3") {
		t.Errorf("flush did not sum up the rest:\n%s", buf.String())
	}

	buf.Reset()
	debug := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var d deadLetterLog
	for range 3 * deadLetterLogBurst {
		d.log(debug, t0, "e", "permanent", "boom")
	}
	if got := strings.Count(buf.String(), "msg=dead-lettered "); got != 3*deadLetterLogBurst {
		t.Errorf("at Debug %d lines, want all %d", got, 3*deadLetterLogBurst)
	}
}
