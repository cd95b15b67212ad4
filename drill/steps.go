package drill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// run is one drill in progress.
type run struct {
	env Env
	o   Options
	rep *Report

	published time.Time
	since     int64          // the catalog's last entry ID before the publish
	entry     *catalog.Entry // the drill's dead letter, once in the catalog
	// acked and discarded: how the drill message left the work list.
	acked, discarded bool
	before           *ledger.Row // the queue's ledger before the publish (nil: none yet)
	// dlqBefore is the broker's dead-letter queue depth before the publish
	// (-1: the transport cannot count it); inBrokerDLQ is set when the
	// drill's dead letter is taken to wait there, never ingested.
	dlqBefore   int64
	inBrokerDLQ bool
}

// add records a step.
func (r *run) add(name, status string, d time.Duration, format string, args ...any) {
	r.rep.Steps = append(r.rep.Steps, Step{Name: name, Status: status, DurationMillis: max(d, 0).Milliseconds(), Detail: fmt.Sprintf(format, args...)})
}

// steps runs the drill's steps in order. A step whose prerequisite
// failed is not checked; the ledger step always runs, to say what was
// left behind.
func (r *run) steps(ctx context.Context) {
	q := r.env.Queue.Name
	var err error
	if r.before, _, err = r.ledgerRow(ctx); err != nil {
		r.add(StepPublish, Failed, 0, "read the ledger of %s before publishing: %v", q, err)
		return
	}
	if r.since, err = r.env.Catalog.LastID(ctx); err != nil {
		r.add(StepPublish, Failed, 0, "read the catalog before publishing: %v", err)
		return
	}
	r.dlqBefore = r.dlqDepth(ctx)
	alert := r.alertBaseline(ctx)
	if !r.publish(ctx) {
		return
	}
	dl := r.awaitDeadLetter(ctx)
	finish := StepRedrive
	if r.o.Finish == FinishDiscard {
		finish = StepDiscard
	}
	if !dl {
		for _, s := range []string{StepAlert, StepConsole, StepDLQShow, finish} {
			r.add(s, NotChecked, 0, "not checked: the drill message never reached the catalog (see %s)", StepDeadLettered)
		}
		r.ledgerStep(ctx)
		return
	}
	r.alertStep(ctx, alert)
	r.consoleStep(ctx)
	r.showStep(ctx)
	if finish == StepRedrive {
		r.redriveStep(ctx)
	} else {
		start := r.o.Now()
		if err := r.discard(ctx, []int64{r.entry.ID}, "lily drill "+r.rep.Drill+": the queue's consumers cannot recognise a drill message, so its dead letter is discarded"); err != nil {
			r.add(StepDiscard, Failed, r.o.Now().Sub(start), "discard entry %d: %v", r.entry.ID, err)
		} else {
			r.add(StepDiscard, Passed, r.o.Now().Sub(start), "entry %d discarded with a record (lily audit --op shows it)", r.entry.ID)
		}
	}
	r.ledgerStep(ctx)
}

// publish sends the drill message: a poison by construction (a
// non-canonical x-retry-count, which every Lily consumer dead-letters
// before running a handler) marked with x-lily-drill.
func (r *run) publish(ctx context.Context) bool {
	id := lily.NewEventID()
	r.rep.EventID, r.rep.Drill = id, evidence.DrillMark(id)
	body := fmt.Sprintf(`{"lily_drill":%q,"note":"a synthetic poison message of 'lily drill': Lily consumers dead-letter it before any handler, and ack its redrive without running the handler"}`, r.rep.Drill)
	msg := lily.Message{EventID: id, Type: "lily.drill", Body: []byte(body), Headers: transport.Headers{
		evidence.HeaderDrill:      r.rep.Drill,
		evidence.HeaderRetryCount: "drill", // a string is never canonical (docs/design.md §7.4)
	}}
	if v := r.env.Queue.SchemaVersions; len(v) > 0 {
		msg.SchemaVersion = v[0] // a version its consumers read: else the schema check, not the drill, would dead-letter it
	}
	start := r.o.Now()
	if err := lily.Publish(ctx, r.env.Publisher, r.env.Queue.Name, []lily.Message{msg}); err != nil {
		r.add(StepPublish, Failed, r.o.Now().Sub(start), "publish the drill message to %s: %v", r.env.Queue.Name, err)
		return false
	}
	r.published = r.o.Now()
	r.add(StepPublish, Passed, r.published.Sub(start), "published event %s (x-lily-drill %s, x-retry-count \"drill\") to %s on %s",
		id, r.rep.Drill, r.env.Queue.Name, r.env.Queue.Transport)
	return true
}

// awaitDeadLetter waits for the drill message's catalog entry and checks
// its reason: the steps dead_lettered and catalog.
func (r *run) awaitDeadLetter(ctx context.Context) bool {
	deadline := r.published.Add(r.o.Timeout)
	for {
		refs, err := r.env.Catalog.Returned(ctx, r.since, []string{r.rep.EventID})
		if err == nil && len(refs) > 0 {
			seen := r.o.Now()
			e, gerr := r.env.Catalog.Get(ctx, refs[0].ID)
			if gerr != nil {
				err = gerr
			} else {
				r.entry, r.rep.EntryID = e, e.ID
				r.deadLettered(e, seen)
				return true
			}
		}
		if err != nil && ctx.Err() == nil {
			r.add(StepDeadLettered, Failed, r.o.Now().Sub(r.published), "look for the drill's dead letter in the catalog: %v", err)
			r.add(StepCatalog, NotChecked, 0, "not checked: the catalog could not be read")
			return false
		}
		if !r.o.Now().Before(deadline) || ctx.Err() != nil {
			r.timedOut(ctx)
			return false
		}
		r.pause(ctx, deadline)
	}
}

// pause waits one poll interval between looks, less when deadline or the
// end of ctx comes first.
func (r *run) pause(ctx context.Context, deadline time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(min(r.o.Poll, time.Until(deadline))):
	}
}

// deadLettered records the steps dead_lettered and catalog for e, seen in
// the catalog at seen.
func (r *run) deadLettered(e *catalog.Entry, seen time.Time) {
	consumer, _ := e.Headers[evidence.HeaderConsumer].(string)
	who := strings.TrimSpace(consumer + " " + e.ConsumerVersion)
	if host, ok := e.Headers[evidence.HeaderHost].(string); ok && host != "" {
		who += " on " + host
	}
	at := e.DeadLetteredAt
	if at.IsZero() || at.Before(r.published) {
		at = seen // a clock apart from ours: the time it was seen is the bound
	}
	if e.Reason != ExpectedReason {
		r.add(StepDeadLettered, Failed, at.Sub(r.published), "dead-lettered with reason %q (error %s: %s), want %q: the consumer of %s treats a non-canonical x-retry-count otherwise than Lily's runtime",
			e.Reason, e.ErrorType, e.ErrorMessage, ExpectedReason, e.Queue)
	} else {
		r.add(StepDeadLettered, Passed, at.Sub(r.published), "dead-lettered with reason %s by %s (source %s); its handler was not run", e.Reason, orNone(who), e.Source)
	}
	r.add(StepCatalog, Passed, seen.Sub(r.published), "catalog entry %d (state %s, reason %s)", e.ID, e.State, e.Reason)
}

// dlqDepth is the broker's dead-letter queue depth of the queue, -1 when
// the transport cannot count it.
func (r *run) dlqDepth(ctx context.Context) int64 {
	dc, ok := r.env.Publisher.(transport.DeadLetterCounter)
	if !ok {
		return -1
	}
	n, err := dc.DeadLetterDepth(context.WithoutCancel(ctx), r.env.Queue.Name)
	if err != nil {
		return -1
	}
	return n
}

// timedOut records the steps dead_lettered and catalog when the drill's
// dead letter never reached the catalog. On a broker whose dead-letter
// queue grew since the publish, the consumer most likely did its part and
// the ingest did not: the catalog step fails, and the dead-lettering,
// whose reason only the catalog shows, is not checked.
func (r *run) timedOut(ctx context.Context) {
	q := r.env.Queue
	took := r.o.Now().Sub(r.published)
	if now := r.dlqDepth(ctx); r.dlqBefore >= 0 && now > r.dlqBefore {
		r.inBrokerDLQ = true
		r.add(StepDeadLettered, NotChecked, took, "not checked: the %s dead-letter queue of %s grew from %d to %d messages since the publish, "+
			"likely with the drill's dead letter, but its reason shows only once it is in the catalog", q.Transport, q.Name, r.dlqBefore, now)
		r.add(StepCatalog, Failed, took, "timed out after %s awaiting the drill's dead letter (event %s) in the catalog: it waits in the broker's "+
			"dead-letter queue, not ingested. Is 'lily serve' running on this catalog without --no-ingest? (or run 'lily dlq ingest --queue %s')",
			r.o.Timeout, r.rep.EventID, q.Name)
		return
	}
	r.add(StepDeadLettered, Failed, took, "%s", r.notDeadLettered(ctx))
	r.add(StepCatalog, NotChecked, 0, "not checked: no dead letter of the drill message was seen")
}

// notDeadLettered says what was awaited and what the queue shows instead.
func (r *run) notDeadLettered(ctx context.Context) string {
	q := r.env.Queue
	var b strings.Builder
	fmt.Fprintf(&b, "timed out after %s awaiting the dead letter of drill message %s: no catalog entry of that event ID on %s "+
		"(a Lily consumer dead-letters it at its first delivery, reason %s)", r.o.Timeout, r.rep.EventID, q.Name, ExpectedReason)
	if qi, ok := r.env.Publisher.(transport.QueueInspector); ok {
		st, err := qi.MessageStatuses(context.WithoutCancel(ctx), q.Name, []string{r.rep.EventID})
		switch {
		case err != nil:
			fmt.Fprintf(&b, "; the queue could not be read: %v", err)
		case st[r.rep.EventID] == transport.MessageWaiting:
			fmt.Fprintf(&b, "; the message still waits in %s, received by no consumer: is a consumer of %s running?", q.Name, q.Name)
		case st[r.rep.EventID] != 0:
			fmt.Fprintf(&b, "; a consumer received it and has not settled it (status %d)", st[r.rep.EventID])
		}
		return b.String()
	}
	fmt.Fprintf(&b, "; is a consumer of %s running? On %s a dead letter reaches the catalog through the ingest of 'lily serve' (not --no-ingest) "+
		"or 'lily dlq ingest --queue %s'", q.Name, q.Transport, q.Name)
	if r.dlqBefore >= 0 {
		fmt.Fprintf(&b, "; the broker's dead-letter queue did not grow (%d messages)", r.dlqBefore)
	}
	return b.String()
}

// redriveStep redrives the drill's entry as a sampled job of one message
// and waits for its ack: the consumers' drill path acks it without the
// handler. Whatever the outcome, it leaves no held entry of the drill.
func (r *run) redriveStep(ctx context.Context) {
	start := r.o.Now()
	if r.env.Target == nil {
		r.add(StepRedrive, NotChecked, 0, "not checked: no redrive target was given")
		r.cleanUp(ctx, "no redrive target")
		return
	}
	rd := redrive.New(r.env.Catalog)
	op := catalog.NewOp(start)
	holder := "lily-drill-" + r.rep.EventID
	j, err := rd.CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{IDs: []int64{r.entry.ID}}, Sample: 1, Observe: r.o.AckTimeout,
		Actor: r.o.Actor, Op: op, Holder: holder})
	if err == nil {
		maxRedrives := max(1, r.env.Queue.Settings().MaxRedrives) // the synthetic message goes once even where every redrive is manual
		j, err = rd.RunJob(ctx, j, redrive.JobRunParams{Holder: holder, Target: r.env.Target, Tick: r.env.Tick, CancelOnStop: true,
			MaxRedrives: func(string) int { return maxRedrives }, Poll: r.o.Poll})
	}
	took := r.o.Now().Sub(start)
	switch {
	case err == nil && j.SampleClean:
		r.acked = true
		r.add(StepRedrive, Passed, took, "redrive job %d sent the drill message back to %s; a consumer acked it within %s (the drill path: acked without running the handler)",
			j.ID, r.env.Queue.Name, took.Round(time.Millisecond))
		return
	case err == nil:
		err = fmt.Errorf("redrive job %d ended %s without a sample", j.ID, j.State)
	}
	var se *redrive.SampleError
	if errors.As(err, &se) {
		ids := []int64{r.entry.ID}
		for _, e := range se.Returned {
			ids = append(ids, e.ID)
		}
		r.add(StepRedrive, Failed, took, "the redriven drill message was not acked: %s. A consumer without the drill path runs its handler on it: "+
			"update the consumer, or drill with --finish discard", se.Detail)
		r.cleanUp(ctx, "its redrive was not acked", ids...)
		return
	}
	r.add(StepRedrive, Failed, took, "redrive the drill's entry %d: %v", r.entry.ID, err)
	r.cleanUp(ctx, "its redrive failed")
}

// cleanUp discards the drill's held entries (ids, else its first entry)
// with a record, so that a failed step leaves nothing in the work list.
func (r *run) cleanUp(ctx context.Context, why string, ids ...int64) {
	if len(ids) == 0 {
		ids = []int64{r.entry.ID}
	}
	if err := r.discard(context.WithoutCancel(ctx), ids, "lily drill "+r.rep.Drill+": "+why+"; the synthetic message is discarded so the drill leaves nothing behind"); err != nil {
		r.rep.LeftBehind = fmt.Sprintf("the drill's entries %v could not be discarded (%v): lily dlq discard --ids %s --reason \"lily drill\"", ids, err, joinIDs(ids))
	}
}

// discard discards the held entries ids with reason, audited under the
// drill's actor.
func (r *run) discard(ctx context.Context, ids []int64, reason string) error {
	res, err := r.env.Catalog.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{IDs: ids}, Reason: reason, Actor: r.o.Actor})
	if err == nil && res.Count > 0 {
		r.discarded = true
	}
	return err
}

// ledgerRow reads the queue's ledger row (nil when the queue has none
// yet). A broker that cannot count the queue's messages
// (transport.ErrNoCount: Pub/Sub without a count source) gives the row
// without what it holds, and uncounted says why: the catalog's counts
// still show the drill message, but not whether the queue balances.
func (r *run) ledgerRow(ctx context.Context) (row *ledger.Row, uncounted, err error) {
	rows, err := r.env.Ledger.Rows(ctx, r.env.InFlight)
	if errors.Is(err, transport.ErrNoCount) {
		uncounted = err
		rows, err = r.env.Ledger.Rows(ctx, nil)
	}
	if err != nil {
		return nil, uncounted, err
	}
	for _, row := range rows {
		if row.Queue == r.env.Queue.Name {
			return &row, uncounted, nil
		}
	}
	return nil, uncounted, nil
}

// ledgerStep checks that the drill left nothing behind: its message acked
// or discarded with a record, none of its entries held, the queue's
// ledger balanced and counting the drill message.
func (r *run) ledgerStep(ctx context.Context) {
	start := r.o.Now()
	q := r.env.Queue.Name
	var problems []string
	if r.rep.EventID != "" {
		held, err := r.env.Catalog.List(ctx, catalog.Filter{EventIDs: []string{r.rep.EventID}, States: catalog.HeldStates}, 10)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("the catalog could not be read: %v", err))
		case len(held) > 0:
			ids := make([]int64, len(held))
			for i, e := range held {
				ids[i] = e.ID
			}
			problems = append(problems, fmt.Sprintf("entries %v of the drill are still held", ids))
			r.leave(fmt.Sprintf("lily dlq discard --ids %s --reason \"lily drill\"", joinIDs(ids)))
		}
		if !r.acked && !r.discarded {
			problems = append(problems, fmt.Sprintf("the drill message %s was neither acked nor discarded", r.rep.EventID))
			switch {
			case r.inBrokerDLQ:
				r.leave(fmt.Sprintf("message %s waits in the broker's dead-letter queue of %s: lily dlq ingest --queue %s, then lily dlq discard --queue %s --event-ids %s --reason \"lily drill\"",
					r.rep.EventID, q, q, q, r.rep.EventID))
			case r.entry == nil:
				r.leave(fmt.Sprintf("message %s waits in %s: a Lily consumer will dead-letter it (reason %s); then discard it: lily dlq discard --queue %s --event-ids %s --reason \"lily drill\"",
					r.rep.EventID, q, ExpectedReason, q, r.rep.EventID))
			}
		}
	}
	// A broker's counts lag its settlements (RabbitMQ's management
	// statistics by seconds): the balance is looked at until it holds or
	// the drill's timeout passes, and the last look is reported (one look
	// when the step has failed already).
	deadline := r.o.Now().Add(r.o.Timeout)
	if len(problems) > 0 {
		deadline = r.o.Now()
	}
	var counts string
	var balance []string
	var uncounted error
	for {
		counts, balance, uncounted = r.ledgerBalance(ctx)
		if len(balance) == 0 || !r.o.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
		r.pause(ctx, deadline)
	}
	problems = append(problems, balance...)
	took := r.o.Now().Sub(start)
	if len(problems) > 0 {
		r.add(StepLedger, Failed, took, "%s; ledger of %s: %s", strings.Join(problems, "; "), q, orNone(counts))
		return
	}
	end := "acked"
	if !r.acked {
		end = "discarded with a record"
	}
	if uncounted != nil {
		r.add(StepLedger, NotChecked, took, "NOT CHECKED whether the ledger of %s balances: %v. Checked: the drill message was counted accepted and %s, none of its entries is held (%s)",
			q, uncounted, end, counts)
		return
	}
	r.add(StepLedger, Passed, took, "nothing left behind: the drill message was counted accepted and %s; the ledger of %s balances (%s)", end, q, counts)
}

// ledgerBalance reads the queue's ledger row: its counts and what is
// wrong with them (not balanced, or not counting the drill message).
func (r *run) ledgerBalance(ctx context.Context) (counts string, problems []string, uncounted error) {
	q := r.env.Queue.Name
	after, uncounted, err := r.ledgerRow(ctx)
	if err != nil {
		return "", []string{fmt.Sprintf("the ledger could not be read: %v", err)}, uncounted
	}
	if after == nil {
		return "", []string{fmt.Sprintf("the ledger has no row of %s", q)}, uncounted
	}
	counts = fmt.Sprintf("accepted %d, acked %d, dead-lettered %d, discarded %d, redirected %d, in flight %d, lost %d",
		after.Accepted, after.Acked, after.DeadLettered, after.Discarded, after.Redirected, after.InFlight, after.Lost)
	var b ledger.Row
	if r.before != nil {
		b = *r.before
	}
	switch {
	case uncounted != nil:
		// what the broker holds is not known: the balance is reported as
		// not checked (ledgerStep), the drill message's counts below are
		counts = strings.Replace(counts, fmt.Sprintf(", in flight %d, lost %d", after.InFlight, after.Lost), ", in flight not counted", 1)
	case r.env.InFlight == nil:
		problems = append(problems, "the transport's in-flight count was not given: the balance cannot be read")
	case !after.Balanced():
		problems = append(problems, fmt.Sprintf("the ledger of %s does not balance (lost %d, unknown %d: %s)", q, after.Lost, after.Unknown, after.UnknownWhy))
	}
	switch {
	case r.published.IsZero():
		// nothing was published: nothing to count
	case after.Accepted <= b.Accepted:
		problems = append(problems, fmt.Sprintf("accepted did not rise with the drill message (%d before, %d after)", b.Accepted, after.Accepted))
	case r.acked && after.Acked <= b.Acked:
		problems = append(problems, fmt.Sprintf("acked did not rise with the drill's ack (%d before, %d after)", b.Acked, after.Acked))
	case r.discarded && !r.acked && after.Discarded <= b.Discarded:
		problems = append(problems, fmt.Sprintf("discarded did not rise with the drill's discard (%d before, %d after)", b.Discarded, after.Discarded))
	}
	return counts, problems, uncounted
}

// leave adds to what the drill left behind.
func (r *run) leave(s string) {
	if r.rep.LeftBehind != "" {
		r.rep.LeftBehind += "; "
	}
	r.rep.LeftBehind += s
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ",")
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	return s
}
