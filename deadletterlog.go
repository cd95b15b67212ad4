package lily

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// deadLetterLogBurst is how many dead letters a consumer logs one line each
// per second (at Warn, with event ID, reason and error). Past it, lines are
// counted instead and summed up in one line per reason when the second is
// over (at the next dead letter, or when the consumer stops): a poison storm
// of thousands of dead letters a second must not turn into as many log
// lines. The dead letters themselves carry the full evidence, and every one
// is reported to the hooks. With the logger at Debug every dead letter is
// logged, as before.
const deadLetterLogBurst = 10

// deadLetterLog rate-limits the per-dead-letter log line. Its zero value is
// ready; it is safe for concurrent use.
type deadLetterLog struct {
	mu         sync.Mutex
	start      time.Time      // the current one-second window
	logged     int            // lines logged in it
	suppressed map[string]int // per reason, lines not logged since the last summary
}

// log logs the dead-lettering of eventID, or counts it when the window's
// burst is spent. now is the time of the dead-lettering.
func (l *deadLetterLog) log(lg *slog.Logger, now time.Time, eventID, reason, errMsg string) {
	if lg.Enabled(context.Background(), slog.LevelDebug) {
		lg.Warn("dead-lettered", "event_id", eventID, "reason", reason, "err", errMsg)
		return
	}
	l.mu.Lock()
	if now.Sub(l.start) >= time.Second || now.Before(l.start) {
		l.summaryLocked(lg)
		l.start, l.logged = now, 0
	}
	if l.logged >= deadLetterLogBurst {
		if l.suppressed == nil {
			l.suppressed = map[string]int{}
		}
		l.suppressed[reason]++
		l.mu.Unlock()
		return
	}
	l.logged++
	l.mu.Unlock()
	lg.Warn("dead-lettered", "event_id", eventID, "reason", reason, "err", errMsg)
}

// flush logs the summary of what is still counted (the consumer stops).
func (l *deadLetterLog) flush(lg *slog.Logger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.summaryLocked(lg)
}

// summaryLocked logs one line per reason with lines suppressed, and resets
// the counts. l.mu is held.
func (l *deadLetterLog) summaryLocked(lg *slog.Logger) {
	reasons := make([]string, 0, len(l.suppressed))
	for r := range l.suppressed {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		lg.Warn("dead-lettered more messages than were logged one by one; each is in the dead-letter destination with its evidence",
			"reason", r, "count", l.suppressed[r], "logged_per_second", deadLetterLogBurst)
	}
	clear(l.suppressed)
}
