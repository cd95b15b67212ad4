package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// ObserveParams are the arguments of Observe.
type ObserveParams struct {
	// Since is the entry ID watermark taken before the redrive (LastID).
	Since int64
	// EventIDs are the redriven messages to watch.
	EventIDs []string
	// Window is how long to watch.
	Window time.Duration
	// Poll is the pause between looks. Defaults to 200ms.
	Poll time.Duration
	// Tick, if set, runs before each look: e.g. ingesting a broker's DLQ
	// so that its dead letters reach the catalog.
	Tick func(ctx context.Context) error
}

// Observe watches redriven messages for Window: it returns as soon as any
// of them is dead-lettered again (a new catalog entry with its event ID),
// or nil entries when the window passed without one.
func (rd *Redriver) Observe(ctx context.Context, p ObserveParams) ([]catalog.EntryRef, error) {
	poll := p.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	deadline := time.Now().Add(p.Window)
	for {
		if p.Tick != nil {
			if err := p.Tick(ctx); err != nil {
				return nil, fmt.Errorf("observe: %w", err)
			}
		}
		back, err := rd.store.Returned(ctx, p.Since, p.EventIDs)
		if err != nil || len(back) > 0 {
			return back, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(poll, left)):
		}
	}
}

// describeRefs lists up to n event IDs of refs for a message.
func describeRefs(refs []catalog.EntryRef, n int) string {
	var parts []string
	for i, r := range refs {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(refs)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (entry %d, %s)", r.EventID, r.ID, r.Queue))
	}
	return strings.Join(parts, ", ")
}

// RecordObservation audits the outcome of watching a redrive sample
// (ObserveParams.EventIDs) for window under operation op: clean, or
// stopped because the entries back were dead-lettered again. For the
// latter it returns the error to report.
func (rd *Redriver) RecordObservation(ctx context.Context, op, actor string, sampled []string, window time.Duration, back []catalog.EntryRef) error {
	d := newDecision(op, actor, fmt.Sprintf(`{"observe":%q}`, window.String()), nil)
	if len(back) == 0 {
		return rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(catalog.ActionRedrive, catalog.OutcomeObserved, false, sampled,
			fmt.Sprintf("none of the %d sampled messages was dead-lettered again within %s", len(sampled), window)))
	}
	ids := make([]string, len(back))
	for i, r := range back {
		ids[i] = r.EventID
	}
	detail := "sampled messages were dead-lettered again within " + window.String() + ": " + describeRefs(back, 10) +
		"; the rest of the selection was not redriven"
	if err := rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(catalog.ActionRedrive, catalog.OutcomeStopped, false, ids, detail)); err != nil {
		return err
	}
	return errors.New("redrive stopped: " + detail)
}

// sampleVerdict is what watching a sample proved.
type sampleVerdict struct {
	clean    bool
	detail   string
	returned []catalog.EntryRef
}

// sampleCounts are the sampled messages by what became of them.
type sampleCounts struct {
	acked, received, retried int
	retriedIDs               []string
}

// watchSample watches the job's sample until every message was acked (the
// sample passes), one was dead-lettered again or retried (it fails at
// once), or the window ends with some not acked (it fails: a sample nobody
// processed proves nothing). It renews the job's lease at each look.
func (rd *Redriver) watchSample(ctx context.Context, r *jobRun, p JobRunParams) (sampleVerdict, error) {
	j := r.job
	poll := p.Poll
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	var queues []string
	seen := map[string]bool{}
	for _, m := range j.Sampled {
		if !seen[m.Queue] {
			seen[m.Queue] = true
			queues = append(queues, m.Queue)
		}
	}
	inspectors := map[string]transport.QueueInspector{}
	if p.Target != nil {
		for _, q := range queues {
			if t, err := p.Target(ctx, q); err == nil {
				if qi, ok := t.(transport.QueueInspector); ok {
					inspectors[q] = qi
				}
			}
		}
	}
	ids := sampledIDs(j.Sampled)
	n, window := len(j.Sampled), j.Observe.String()
	rest := "; the rest of the selection was not redriven (it stays pending)"
	for {
		if p.Tick != nil {
			if err := p.Tick(ctx, queues); err != nil {
				return sampleVerdict{}, fmt.Errorf("observe: %w", err)
			}
		}
		// The queue first, the catalog second: a message that left the
		// queue by being dead-lettered again is in the catalog by then (the
		// SQLite transport does both in one transaction).
		c, err := rd.sampleStatus(ctx, j, inspectors)
		if err != nil {
			return sampleVerdict{}, err
		}
		back, err := rd.store.Returned(ctx, j.sinceID, ids)
		if err != nil {
			return sampleVerdict{}, err
		}
		if len(back) > 0 {
			return sampleVerdict{returned: back, detail: "sampled messages were dead-lettered again within " + window + ": " +
				describeRefs(back, 10) + rest}, nil
		}
		switch {
		case c.retried > 0:
			return sampleVerdict{detail: fmt.Sprintf("%d of the %d sampled messages were retried within %s (a consumer failed on them: %s)%s",
				c.retried, n, window, strings.Join(c.retriedIDs[:min(10, len(c.retriedIDs))], ", "), rest)}, nil
		case c.acked == n:
			return sampleVerdict{clean: true, detail: fmt.Sprintf("all %d sampled messages were acked within %s", n, window)}, nil
		}
		left := j.SampleUntil.Sub(p.Now())
		if left <= 0 {
			if c.acked == 0 && c.received == 0 {
				return sampleVerdict{detail: fmt.Sprintf("no consumer acked the sample within %s: is a consumer running? "+
					"(none of the %d sampled messages was acked, retried or dead-lettered again)%s", window, n, rest)}, nil
			}
			return sampleVerdict{detail: fmt.Sprintf("%d of the %d sampled messages were acked within %s; the others were neither acked nor "+
				"dead-lettered again (still in process, or being retried)%s", c.acked, n, window, rest)}, nil
		}
		if err := r.check(ctx, rd.db); err != nil {
			return sampleVerdict{}, err
		}
		select {
		case <-ctx.Done():
			return sampleVerdict{}, ctx.Err()
		case <-time.After(min(poll, left)):
		}
	}
}

// sampleStatus counts the job's sampled messages by what became of them:
// from the queue itself (transport.QueueInspector) or from the ledger's ack events
// recorded since the sample was sent.
func (rd *Redriver) sampleStatus(ctx context.Context, j *Job, inspectors map[string]transport.QueueInspector) (sampleCounts, error) {
	var c sampleCounts
	byQueue := map[string][]SampledMessage{}
	var order []string
	for _, m := range j.Sampled {
		if _, ok := byQueue[m.Queue]; !ok {
			order = append(order, m.Queue)
		}
		byQueue[m.Queue] = append(byQueue[m.Queue], m)
	}
	for _, q := range order {
		ms := byQueue[q]
		if qi, ok := inspectors[q]; ok {
			st, err := qi.MessageStatuses(ctx, q, sampledIDs(ms))
			if err != nil {
				return c, fmt.Errorf("observe %s: %w", q, err)
			}
			for _, m := range ms {
				switch st[m.EventID] {
				case 0:
					c.acked++
				case transport.MessageReceived:
					c.received++
				case transport.MessageRetried:
					c.retried++
					c.retriedIDs = append(c.retriedIDs, m.EventID)
				}
			}
			continue
		}
		keys := make([]string, len(ms))
		for i, m := range ms {
			keys[i] = m.LedgerKey
		}
		n, err := rd.ledger.AckedSince(ctx, q, time.UnixMilli(j.sampleAt), keys)
		if err != nil {
			return c, err
		}
		c.acked += n
	}
	return c, nil
}

// recordVerdict stores and audits what the sample proved.
func (rd *Redriver) recordVerdict(ctx context.Context, r *jobRun, v sampleVerdict) error {
	j := r.job
	d := newDecision(j.Op, j.Actor, fmt.Sprintf(`{"job":%d,"observe":%q}`, j.ID, j.Observe.String()), nil)
	if v.clean {
		if err := rd.jobUpdate(ctx, r, `sample_clean = 1, state = 'running'`); err != nil {
			return err
		}
		j.SampleClean, j.State = true, JobRunning
		return rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(catalog.ActionRedrive, catalog.OutcomeObserved, false, sampledIDs(j.Sampled), v.detail))
	}
	returned, err := json.Marshal(v.returned)
	if err != nil {
		return err
	}
	if v.returned == nil {
		returned = []byte("[]")
	}
	if err := rd.jobUpdate(ctx, r, `returned = ?`, string(returned)); err != nil {
		return err
	}
	j.Returned = v.returned
	ids := sampledIDs(j.Sampled)
	if len(v.returned) > 0 {
		ids = make([]string, len(v.returned))
		for i, e := range v.returned {
			ids[i] = e.EventID
		}
	}
	return rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(catalog.ActionRedrive, catalog.OutcomeStopped, false, ids, v.detail))
}
