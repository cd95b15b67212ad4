package redrive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// Params are the arguments of Redrive.
type Params struct {
	// catalog.Filter selects the entries; only pending ones are redriven (States
	// is ignored). AfterID, if set, starts the selection after that entry
	// ID (a resumed job's cursor).
	Filter catalog.Filter
	// Limit caps the number of entries; 0 means all that match.
	Limit int
	// DryRun lists what would happen and changes nothing; the plan is
	// audited all the same.
	DryRun bool
	// Rate is the most messages sent per second (a token bucket); 0 means
	// as fast as the transport confirms.
	Rate float64
	// Batch is the most messages published and committed at once.
	// Defaults to 500; with a Rate, at most a tenth of a second's worth.
	Batch int
	// MaxRedrives returns a queue's max_redrives: entries already redriven
	// that many times become needs_manual instead of being sent. Nil means
	// DefaultMaxRedrives for every queue.
	MaxRedrives func(queue string) int
	// Target returns the transport that publishes into a queue (the
	// entry's source queue). It should fail for a queue that no longer
	// exists; it is called once per queue before anything is sent.
	Target func(ctx context.Context, queue string) (Publisher, error)
	// Actor is who decides. Defaults to catalog.DefaultActor().
	Actor string
	// Op is the operation ID for the audit log. Defaults to catalog.NewOp.
	Op string
	// Options describes further options for the audit selector (e.g. the
	// sample size), as a JSON object's members; may be empty.
	Options string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// OnEntry, if set, is called for each entry with its outcome
	// (catalog.OutcomeRedriven, catalog.OutcomeNeedsManual or the dry run's "would_").
	OnEntry func(e catalog.EntryRef, outcome string)
	// Progress, if set, is called after each batch.
	Progress func(Progress)
	// IncludeCrashers lets delivery_limit entries (crash-type poison: the
	// consumer died on the message, docs/design.md §9) into a bulk redrive. Without
	// it, or NewConsumerVersion, they are held back (Result.HeldBack)
	// unless the filter names entries by ID or event ID.
	IncludeCrashers bool
	// NewConsumerVersion names the consumer version now running, which
	// fixes the crash: delivery_limit entries dead-lettered by another
	// version (or by an unrecorded one) go; those of this very version are
	// still held back.
	NewConsumerVersion string
	// To, when set, redirects the redrive: the messages go to this queue
	// (a quarantine, the queue of a fixed consumer) instead of their
	// source, through Target(ctx, To), which must fail for a queue that
	// does not exist — the redrive is then refused with nothing changed,
	// dry run or not. The audit names both queues; the source's ledger
	// counts the entries as redirected, the target's as accepted.
	To string

	// OnRate, if set, is called with what each batch asks of the rate
	// limit's token bucket, just before it waits for the tokens: so that a
	// test can check the limit by its tokens, never by the clock.
	OnRate func(RateAsk)

	// job, if set, ties the redrive to a stored job (RunJob).
	job *jobRun
}

// RateAsk is what one batch of a rate-limited redrive asks of its token
// bucket (Params.OnRate), seen before it waits.
type RateAsk struct {
	// Limit is the bucket's rate in messages per second, Burst its size.
	Limit float64
	Burst int
	// Tokens is what the bucket holds when the batch asks.
	Tokens float64
	// N is the tokens the batch takes: its messages.
	N int
}

// crasherHold says which delivery_limit entries a redrive holds back.
type crasherHold struct {
	include bool
	version string
}

func (p Params) hold() crasherHold {
	return crasherHold{include: p.IncludeCrashers || explicitPick(p.Filter), version: p.NewConsumerVersion}
}

// keep is the SQL condition of the entries a redrive may send ("" for
// all).
func (h crasherHold) keep() (string, []any) {
	switch {
	case h.include:
		return "", nil
	case h.version != "":
		return "NOT (reason = 'delivery_limit' AND consumer_version = ?)", []any{h.version}
	}
	return "reason <> 'delivery_limit'", nil
}

// held is the SQL condition of the entries held back ("" for none).
func (h crasherHold) held() (string, []any) {
	switch {
	case h.include:
		return "", nil
	case h.version != "":
		return "reason = 'delivery_limit' AND consumer_version = ?", []any{h.version}
	}
	return "reason = 'delivery_limit'", nil
}

// Count counts what Redrive(p) would handle now — the pending entries of
// p.Filter (after p.Filter.AfterID), at most p.Limit — and the
// delivery_limit entries it would hold back (p.IncludeCrashers,
// p.NewConsumerVersion), as a dry run counts them, without an audit
// record.
func (rd *Redriver) Count(ctx context.Context, p Params) (selected, heldBack int, err error) {
	f := p.Filter
	f.States = []catalog.State{catalog.StatePending}
	return rd.planCounts(ctx, f, p.hold(), p.Limit)
}

// whereAnd is f's WHERE clause with cond added.
func (rd *Redriver) whereAnd(f catalog.Filter, cond string, cargs []any) (string, []any) {
	sel := rd.selection(f)
	where, args := sel.Where, sel.Args
	switch {
	case cond == "":
		return where, args
	case where == "":
		return " WHERE " + cond, cargs
	}
	return where + " AND " + cond, append(args, cargs...)
}

func (rd *Redriver) countWhere(ctx context.Context, where string, args []any) (int, error) {
	var n int64
	if err := rd.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_dlq_entries`+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("catalog: count entries: %w", err)
	}
	return int(n), nil
}

// planCounts counts what a redrive of f would handle (capped at limit)
// and the crashers it holds back.
func (rd *Redriver) planCounts(ctx context.Context, f catalog.Filter, h crasherHold, limit int) (total, heldBack int, err error) {
	keep, kargs := h.keep()
	w, a := rd.whereAnd(f, keep, kargs)
	if total, err = rd.countWhere(ctx, w, a); err != nil {
		return 0, 0, err
	}
	if limit > 0 {
		total = min(total, limit)
	}
	if held, hargs := h.held(); held != "" {
		w, a := rd.whereAnd(f, held, hargs)
		if heldBack, err = rd.countWhere(ctx, w, a); err != nil {
			return 0, 0, err
		}
	}
	return total, heldBack, nil
}

// Progress is reported after each batch.
type Progress struct {
	// Done is the number of entries handled so far, of Total.
	Done, Total int
	// Elapsed is the time since the first batch.
	Elapsed time.Duration
}

// Result is what a Redrive did (or, in a dry run, would do).
type Result struct {
	// Op is the operation ID under which the audit log records it.
	Op string `json:"op"`
	// DryRun repeats the parameter.
	DryRun bool `json:"dry_run"`
	// Selected is the number of pending entries selected.
	Selected int `json:"selected"`
	// Redriven entries were confirmed by the transport and marked redriven.
	Redriven int `json:"redriven"`
	// NeedsManual entries were at max_redrives and not sent.
	NeedsManual int `json:"needs_manual"`
	// HeldBack are the delivery_limit entries of the selection left
	// pending (Params.IncludeCrashers).
	HeldBack int `json:"held_back"`
	// Elapsed is how long the sending took.
	Elapsed time.Duration `json:"-"`
}

// Redrive sends the selected pending entries back to their source queues
// (docs/design.md §9): each message keeps its event ID, key, type, body and
// original headers, with x-retry-count reset to 0, x-lily-redrive-count
// incremented and the previous dead-lettering's evidence removed (it stays
// in the catalog). Entries already redriven max_redrives times are not sent
// and become needs_manual.
//
// Entries are handled in ID order, in batches: a batch is published to its
// queue and, only once the transport confirmed it, marked redriven together
// with its audit record in one transaction. A crash between the two leaves
// the entries pending and their messages sent: redriving again makes
// duplicates (same event IDs), never a loss. When a publish fails — e.g.
// the queue no longer exists — Redrive stops: the failed batch and the rest
// stay pending, the failure is audited, and the error says how far it got.
func (rd *Redriver) Redrive(ctx context.Context, p Params) (res Result, err error) {
	f := p.Filter
	f.States = []catalog.State{catalog.StatePending}
	f.AfterID = 0
	selector := fmt.Sprintf(`{"filter":%s,"limit":%d,"rate":%g`, f.String(), p.Limit, p.Rate)
	if p.IncludeCrashers {
		selector += `,"include_crashers":true`
	}
	if p.NewConsumerVersion != "" {
		selector += fmt.Sprintf(`,"new_consumer_version":%q`, p.NewConsumerVersion)
	}
	if p.job != nil {
		selector += fmt.Sprintf(`,"job":%d`, p.job.job.ID)
	}
	if p.To != "" {
		selector += fmt.Sprintf(`,"to":%q`, p.To)
	}
	if p.Options != "" {
		selector += "," + p.Options
	}
	d := newDecision(p.Op, p.Actor, selector+"}", p.Now)
	res = Result{Op: d.Op, DryRun: p.DryRun}
	if p.Target == nil && !p.DryRun {
		return res, errors.New("catalog: redrive needs a Target for the source queues")
	}
	f.AfterID = p.Filter.AfterID // a resumed job goes on after its cursor
	hold := p.hold()
	total, heldBack, err := rd.planCounts(ctx, f, hold, p.Limit)
	if err != nil {
		return res, err
	}
	res.HeldBack = heldBack
	if total == 0 {
		return res, rd.store.AppendAudit(ctx, d.Record(catalog.ActionRedrive, catalog.OutcomeEmpty, p.DryRun, nil, ""))
	}
	targets, err := rd.redriveTargets(ctx, d, f, hold, p)
	if err != nil {
		return res, err
	}
	maxRedrives := p.MaxRedrives
	if maxRedrives == nil {
		maxRedrives = func(string) int { return DefaultMaxRedrives }
	}
	batch := p.Batch
	if batch <= 0 {
		batch = 500
	}
	var lim *rate.Limiter
	if p.Rate > 0 && !p.DryRun {
		batch = max(1, min(batch, int(p.Rate/10)))
		// The bucket holds up to a second's worth, so that a stall of the
		// transport (a checkpoint, a slow confirm) is made up afterwards
		// and the rate holds over any second; it starts empty, so the
		// first batch waits its turn too.
		burst := max(batch, int(p.Rate))
		lim = rate.NewLimiter(rate.Limit(p.Rate), burst)
		lim.AllowN(time.Now(), burst)
	}
	start := time.Now()
	defer func() { res.Elapsed = time.Since(start) }()
	done, last := 0, f.AfterID
	next := rd.prefetchPage(ctx, f, hold, last, min(batch, total), p.DryRun)
	for done < total {
		if p.job != nil {
			if err := p.job.check(ctx, rd.db); err != nil {
				return res, fmt.Errorf("redrive stopped after %d redriven, %d marked needs_manual: %w", res.Redriven, res.NeedsManual, err)
			}
		}
		pr := <-next
		page, err := pr.page, pr.err
		if err != nil {
			return res, err
		}
		if len(page) == 0 {
			break
		}
		last = page[len(page)-1].ID
		// The next page is read while this one is sent and marked: a
		// read changes nothing, and marking checks that each entry is
		// still pending, so only one batch is ever in flight.
		if rest := total - done - len(page); rest > 0 {
			next = rd.prefetchPage(ctx, f, hold, last, min(batch, rest), p.DryRun)
		}
		res.Selected += len(page)
		var order, refusedOrder []string
		byQueue, refused := map[string][]*catalog.Entry{}, map[string][]*catalog.Entry{}
		for _, e := range page {
			if e.RedriveCount >= maxRedrives(e.Queue) {
				if _, ok := refused[e.Queue]; !ok {
					refusedOrder = append(refusedOrder, e.Queue)
				}
				refused[e.Queue] = append(refused[e.Queue], e)
				continue
			}
			if _, ok := byQueue[e.Queue]; !ok {
				order = append(order, e.Queue)
			}
			byQueue[e.Queue] = append(byQueue[e.Queue], e)
		}
		// The sub-batches in the order they run: the refusals, then the
		// sends, one per queue. A job's cursor after each is below every
		// entry of the page not handled yet, so that a resumed job skips
		// nothing.
		type sub struct {
			queue  string
			es     []*catalog.Entry
			refuse bool
		}
		var subs []sub
		for _, q := range refusedOrder {
			subs = append(subs, sub{q, refused[q], true})
		}
		for _, q := range order {
			subs = append(subs, sub{q, byQueue[q], false})
		}
		cursors := make([]int64, len(subs))
		c := last
		for i := len(subs) - 1; i >= 0; i-- {
			cursors[i] = c
			for _, e := range subs[i].es {
				c = min(c, e.ID-1)
			}
		}
		for i, b := range subs {
			if p.job != nil {
				p.job.cursor = cursors[i]
			}
			if b.refuse {
				n, err := rd.refuse(ctx, d, b.queue, b.es, maxRedrives(b.queue), p)
				res.NeedsManual += n
				if err != nil {
					return res, err
				}
				continue
			}
			n, err := rd.redriveBatch(ctx, d, targets[b.queue], b.queue, b.es, lim, p)
			res.Redriven += n
			if err != nil {
				return res, fmt.Errorf("redrive stopped after %d redriven, %d marked needs_manual: %w (the failed batch and every entry after it are still pending)",
					res.Redriven, res.NeedsManual, err)
			}
		}
		done += len(page)
		if p.Progress != nil {
			p.Progress(Progress{Done: done, Total: total, Elapsed: time.Since(start)})
		}
	}
	return res, nil
}

// redriveTargets resolves the transport of every queue in the selection
// before anything is sent, so that a queue that no longer exists stops the
// redrive with nothing changed. The failure is audited.
func (rd *Redriver) redriveTargets(ctx context.Context, d decision, f catalog.Filter, h crasherHold, p Params) (map[string]Publisher, error) {
	keep, kargs := h.keep()
	where, args := rd.whereAnd(f, keep, kargs)
	rows, err := rd.db.QueryContext(ctx, `SELECT queue, COUNT(*) FROM lily_dlq_entries`+where+` GROUP BY queue ORDER BY queue`, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: redrive: %w", err)
	}
	counts := map[string]int64{}
	var queues []string
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			rows.Close()
			return nil, err
		}
		queues = append(queues, q)
		counts[q] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := map[string]Publisher{}
	if p.Target == nil { // dry run without targets: plan only
		return out, nil
	}
	if p.To != "" {
		return out, rd.redirectTargets(ctx, d, p, queues, counts, out)
	}
	for _, q := range queues {
		t, err := p.Target(ctx, q)
		if err != nil {
			detail := fmt.Sprintf("queue %s: %v", q, err)
			if aerr := rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(catalog.ActionRedrive, catalog.OutcomeFailed, p.DryRun, nil, detail)); aerr != nil {
				return nil, errors.Join(err, aerr)
			}
			return nil, fmt.Errorf("redrive to %s (%d pending entries selected there): %w; nothing was sent or changed", q, counts[q], err)
		}
		out[q] = t
	}
	return out, nil
}

// pageResult is a page read ahead by prefetchPage.
type pageResult struct {
	page []*catalog.Entry
	err  error
}

// prefetchPage reads the page of up to n entries of f after ID last in
// the background (redrivePage); the channel yields it once.
func (rd *Redriver) prefetchPage(ctx context.Context, f catalog.Filter, h crasherHold, last int64, n int, light bool) <-chan pageResult {
	ch := make(chan pageResult, 1)
	go func() {
		pf := f
		pf.AfterID = last
		page, err := rd.redrivePage(ctx, pf, h, n, light)
		ch <- pageResult{page, err}
	}()
	return ch
}

// pageHeld returns up to n entries matching f (with bodies) in ID
// order, without the crashers h holds back.
func (rd *Redriver) pageHeld(ctx context.Context, f catalog.Filter, h crasherHold, n int) ([]*catalog.Entry, error) {
	keep, kargs := h.keep()
	where, args := rd.whereAnd(f, keep, kargs)
	rows, err := rd.db.QueryContext(ctx, `SELECT `+catalogdb.SelectCols+` FROM `+rd.selection(f).From+where+` ORDER BY id LIMIT ?`, append(args, n)...)
	if err != nil {
		return nil, fmt.Errorf("catalog: select entries: %w", err)
	}
	defer rows.Close()
	var out []*catalog.Entry
	for rows.Next() {
		e, err := catalogdb.ScanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// redrivePage returns the next page of the selection: whole entries to
// send, or, for a dry run, only what the plan needs.
func (rd *Redriver) redrivePage(ctx context.Context, f catalog.Filter, h crasherHold, n int, light bool) ([]*catalog.Entry, error) {
	if !light {
		return rd.pageHeld(ctx, f, h, n)
	}
	keep, kargs := h.keep()
	where, args := rd.whereAnd(f, keep, kargs)
	rows, err := rd.db.QueryContext(ctx, `SELECT id, queue, event_id, state, redrive_count, dead_lettered_at FROM `+rd.selection(f).From+
		where+` ORDER BY id LIMIT ?`, append(args, n)...)
	if err != nil {
		return nil, fmt.Errorf("catalog: select entries: %w", err)
	}
	defer rows.Close()
	var out []*catalog.Entry
	for rows.Next() {
		var e catalog.Entry
		var st string
		var at int64
		if err := rows.Scan(&e.ID, &e.Queue, &e.EventID, &st, &e.RedriveCount, &at); err != nil {
			return nil, err
		}
		e.State, e.DeadLetteredAt = catalog.State(st), time.UnixMilli(at).UTC()
		out = append(out, &e)
	}
	return out, rows.Err()
}

// refuse marks entries of queue at max_redrives needs_manual (or, in a dry
// run, audits that it would).
func (rd *Redriver) refuse(ctx context.Context, d decision, queue string, es []*catalog.Entry, maxRedrives int, p Params) (int, error) {
	why := fmt.Sprintf("not redriven: the message was already redriven max_redrives (%d for %s) times; decide by hand (discard with a reason, or raise max_redrives)",
		maxRedrives, queue)
	if p.DryRun {
		if err := rd.store.AppendAudit(ctx, d.Record(catalog.ActionRedrive, catalog.OutcomeWouldNeedManual, true, eventIDs(es), why)); err != nil {
			return 0, err
		}
		notify(p, es, catalog.OutcomeWouldNeedManual)
		return len(es), nil
	}
	changed, err := rd.markState(ctx, d, es, `state = 'needs_manual'`, catalog.OutcomeNeedsManual, why, p.job)
	notify(p, changed, catalog.OutcomeNeedsManual)
	return len(changed), err
}

// redriveBatch publishes es to queue and, once confirmed, marks them
// redriven with their audit record.
func (rd *Redriver) redriveBatch(ctx context.Context, d decision, pub Publisher, queue string, es []*catalog.Entry, lim *rate.Limiter, p Params) (n int, err error) {
	dest, sent := redirect(p, queue)
	if p.DryRun {
		why := "would be " + sent
		if err := rd.store.AppendAudit(ctx, d.Record(catalog.ActionRedrive, catalog.OutcomeWouldRedrive, true, eventIDs(es), why)); err != nil {
			return 0, err
		}
		notify(p, es, catalog.OutcomeWouldRedrive)
		return len(es), nil
	}
	if lim != nil {
		if p.OnRate != nil {
			p.OnRate(RateAsk{Limit: float64(lim.Limit()), Burst: lim.Burst(), Tokens: lim.Tokens(), N: len(es)})
		}
		wait := lim.WaitN
		if rd.waitN != nil {
			wait = func(ctx context.Context, n int) error { return rd.waitN(ctx, lim, n) }
		}
		if err := wait(ctx, len(es)); err != nil {
			return 0, fmt.Errorf("rate limit: %w", err)
		}
	}
	tp, inTx := pub.(transport.TxPublisher)
	inTx = inTx && tp.DB() == rd.db.DB
	var claim *catalogdb.Tx
	if !inTx && rd.db.Dialect() == catalogdb.Postgres {
		// Claimed before the bodies are read: an edit of a claimed entry
		// waits, so the version read is the one sent.
		var err error
		if claim, es, err = rd.claim(ctx, es); err != nil {
			return 0, err
		}
		defer claim.Rollback()
		if len(es) == 0 { // all decided or being redriven elsewhere
			return 0, nil
		}
	}
	msgs, err := rd.store.RedriveMessages(ctx, es)
	if err != nil {
		return 0, err
	}
	endSpans := traceRedrive(ctx, rd.TracerProvider, d, dest, msgs)
	defer func() { endSpans(err) }()
	// A redirected message is new to its target queue: the target's
	// ledger counts it accepted (Redrive false), the source's redirected.
	// Direct: the failing consumer alone (or the redirect's target's), never
	// every reader of a topic (docs/design.md §9.3).
	pp := &transport.PublishParams{Queue: dest, Messages: msgs, Redrive: dest == queue, Direct: true}
	if inTx {
		return rd.redriveTx(ctx, d, tp, pp, es, p)
	}
	if p.job != nil {
		if err := p.job.check(ctx, rd.db); err != nil {
			return 0, err
		}
	}
	if err := allowHeads(ctx, rd.db, es); err != nil {
		return 0, err
	}
	if err := pub.Publish(ctx, pp); err != nil {
		if claim != nil {
			claim.Rollback() // the entries go back before the failure is audited
		}
		detail := fmt.Sprintf("publish to %s: %v", dest, err)
		// The entries are unchanged; record the failure even when ctx ended.
		if aerr := rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(d.redriveAction(), catalog.OutcomeFailed, false, eventIDs(es), detail)); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return 0, fmt.Errorf("publish %d entries to %s: %w", len(es), dest, err)
	}
	// Confirmed: from here on the state change must be recorded even if
	// ctx is cancelled, or a later redrive would only add duplicates.
	var changed []*catalog.Entry
	if claim != nil {
		changed, err = markStateTx(context.WithoutCancel(ctx), claim, d, es, redrivenSet(p), catalog.OutcomeRedriven, sent, p.job)
		if err == nil {
			err = claim.Commit()
		}
		if err != nil {
			changed = nil
		}
	} else {
		changed, err = rd.markState(context.WithoutCancel(ctx), d, es, redrivenSet(p), catalog.OutcomeRedriven, sent, p.job)
	}
	notify(p, changed, catalog.OutcomeRedriven)
	return len(changed), err
}

// claim locks, on PostgreSQL, the entries of es still pending that no
// other redrive holds (FOR UPDATE SKIP LOCKED) in a transaction that
// stays open until they are published and marked: two replicas or jobs
// redriving the same entries send each once, and an entry decided
// meanwhile is not sent. It returns the transaction and the claimed
// entries. The transaction outlives ctx: once the broker confirmed, the
// marks must be written.
func (rd *Redriver) claim(ctx context.Context, es []*catalog.Entry) (*catalogdb.Tx, []*catalog.Entry, error) {
	tx, err := rd.db.BeginKeyed(context.WithoutCancel(ctx), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("catalog: claim %d entries for a redrive: %w", len(es), err)
	}
	args := make([]any, len(es))
	for i, e := range es {
		args[i] = e.ID
	}
	claimed := make(map[int64]bool, len(es))
	err = func() error {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM lily_dlq_entries WHERE state = 'pending' AND id IN (`+catalogdb.Placeholders(len(es))+`)
			ORDER BY id FOR UPDATE SKIP LOCKED`, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			claimed[id] = true
		}
		return rows.Err()
	}()
	if err != nil {
		tx.Rollback()
		return nil, nil, fmt.Errorf("catalog: claim %d entries for a redrive: %w", len(es), err)
	}
	mine := es[:0:0]
	for _, e := range es {
		if claimed[e.ID] {
			mine = append(mine, e)
		}
	}
	return tx, mine, nil
}

// redriveTx marks the entries of es still pending redriven and publishes
// their messages in one transaction of the catalog's own database: both
// happen or neither, so not even a crash leaves a duplicate.
func (rd *Redriver) redriveTx(ctx context.Context, d decision, tp transport.TxPublisher, pp *transport.PublishParams, es []*catalog.Entry, p Params) (int, error) {
	var changed []*catalog.Entry
	err := rd.db.WithTx(ctx, func(tx *catalogdb.Tx) error {
		if p.job != nil {
			if err := p.job.check(ctx, tx); err != nil {
				return err
			}
		}
		var err error
		_, sent := redirect(p, es[0].Queue)
		changed, err = markStateTx(ctx, tx, d, es, redrivenSet(p), catalog.OutcomeRedriven, sent, p.job)
		if err != nil || len(changed) == 0 {
			return err
		}
		if err := allowHeads(ctx, tx, changed); err != nil {
			return err
		}
		keep := make(map[int64]bool, len(changed))
		for _, e := range changed {
			keep[e.ID] = true
		}
		var msgs []transport.Message
		for i, e := range es {
			if keep[e.ID] {
				msgs = append(msgs, pp.Messages[i])
			}
		}
		if err := tp.PublishTx(ctx, tx.Tx, &transport.PublishParams{Queue: pp.Queue, Messages: msgs, Redrive: pp.Redrive, Direct: pp.Direct}); err != nil {
			return fmt.Errorf("publish %d entries to %s: %w", len(msgs), pp.Queue, err)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrJobCancelled) || errors.Is(err, ErrJobLeaseLost) {
			return 0, err // nothing was tried: no failure to audit
		}
		if aerr := rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(d.redriveAction(), catalog.OutcomeFailed, false, eventIDs(es), err.Error())); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return 0, err
	}
	notify(p, changed, catalog.OutcomeRedriven)
	return len(changed), nil
}

// markState changes the state of the entries of es that are still pending
// and appends the audit record naming those, in one transaction. It
// returns the entries changed (an entry decided meanwhile by someone else
// is left alone).
func (rd *Redriver) markState(ctx context.Context, d decision, es []*catalog.Entry, set, outcome, why string, job *jobRun) ([]*catalog.Entry, error) {
	var changed []*catalog.Entry
	err := rd.db.WithKeyed(ctx, nil, func(tx *catalogdb.Tx) error {
		var err error
		changed, err = markStateTx(ctx, tx, d, es, set, outcome, why, job)
		return err
	})
	if err != nil {
		return nil, err
	}
	return changed, nil
}

// markStateTx is markState inside tx; with a job, the job's progress is
// recorded in tx too.
func markStateTx(ctx context.Context, tx *catalogdb.Tx, d decision, es []*catalog.Entry, set, outcome, why string, job *jobRun) ([]*catalog.Entry, error) {
	var changed []*catalog.Entry
	err := func() error {
		args := []any{d.Now().UnixMilli(), d.Actor, why}
		byID := make(map[int64]*catalog.Entry, len(es))
		for _, e := range es {
			args = append(args, e.ID)
			byID[e.ID] = e
		}
		rows, err := tx.QueryContext(ctx, `UPDATE lily_dlq_entries SET `+set+`, decided_at = ?1, decided_by = ?2, decision = ?3, updated_at = ?1
			WHERE state = 'pending' AND id IN (`+catalogdb.Placeholders(len(es))+`) RETURNING id`, args...)
		if err != nil {
			return fmt.Errorf("catalog: mark %s: %w", outcome, err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			changed = append(changed, byID[id])
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		detail := why
		if len(changed) < len(es) {
			detail += fmt.Sprintf(" (%d entries were decided by someone else meanwhile and left as they were)", len(es)-len(changed))
		}
		if err := catalogdb.AppendAudit(ctx, tx, d.Record(d.redriveAction(), outcome, false, eventIDs(changed), detail)); err != nil {
			return err
		}
		if job != nil {
			return job.record(ctx, tx, changed, outcome)
		}
		return nil
	}()
	return changed, err
}

func eventIDs(es []*catalog.Entry) []string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.EventID
	}
	return ids
}

func notify(p Params, es []*catalog.Entry, outcome string) {
	if p.OnEntry == nil {
		return
	}
	for _, e := range es {
		r := ref(e)
		if outcome == catalog.OutcomeRedriven {
			r.State, r.RedriveCount = catalog.StateRedriven, e.RedriveCount+1
		} else if outcome == catalog.OutcomeNeedsManual {
			r.State = catalog.StateNeedsManual
		}
		p.OnEntry(r, outcome)
	}
}
