package entryview

import (
	"time"

	"github.com/lily-mq/lily/catalog"
)

// Queue is one queue of the dead-letter work list as 'lily dlq list --json'
// and GET /api/queues show it.
type Queue struct {
	Queue             string     `json:"queue"`
	Owner             string     `json:"owner"`
	Depth             int64      `json:"depth"`
	Pending           int64      `json:"pending"`
	Parked            int64      `json:"parked"`
	NeedsManual       int64      `json:"needs_manual"`
	Oldest            *time.Time `json:"oldest"`
	OldestAgeSeconds  int64      `json:"oldest_age_seconds"`
	RetentionHours    float64    `json:"retention_hours"`
	Deadline          *time.Time `json:"deadline"`
	PastHalfRetention int64      `json:"past_half_retention"`
	InflowLastHour    int64      `json:"inflow_last_hour"`
}

// NewQueue renders a queue's figures at now.
func NewQueue(st catalog.QueueStats, owner string, now time.Time) Queue {
	q := Queue{Queue: st.Queue, Owner: owner, Depth: st.Depth, Pending: st.Pending, Parked: st.Parked, NeedsManual: st.NeedsManual,
		RetentionHours: st.Retention.Hours(), PastHalfRetention: st.PastHalfRetention, InflowLastHour: st.InflowLastHour}
	if !st.Oldest.IsZero() {
		o, d := st.Oldest, st.Deadline
		q.Oldest, q.Deadline = &o, &d
		q.OldestAgeSeconds = int64(now.Sub(o).Seconds())
	}
	return q
}

// Decision summarises a discard, erase or expire as 'lily dlq discard
// --json' (after its entries) and the API show it.
type Decision struct {
	Op      string         `json:"op"`
	Action  string         `json:"action"`
	DryRun  bool           `json:"dry_run"`
	Count   int            `json:"count"`
	Reason  string         `json:"reason,omitempty"`
	ByQueue map[string]int `json:"by_queue,omitempty"`
}
