package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/transport"
)

// A retry is NakWithDelay: the server holds the message for the delay and
// no worker waits (docs/design.md §8.8). The message itself cannot change,
// so what a retry changes lives in a retry record, one message of the
// retry stream per retried message, on subject
// "lily.retries.<stream>.<consumer>.<stream sequence>" (one per subject:
// a later retry replaces it): the complete headers of the retry
// (x-retry-count, the attempt history) as typed JSON, and in
// headerRetryBase the server's NumDelivered when it was retried. A
// redelivery reads it back: its headers are the record's, and its delivery
// count is NumDelivered − base, so that retries never count as deliveries
// and a crash-type poison is still caught at delivery_limit. Settling the
// message for good deletes its record.
const headerRetryBase = "x-lily-retry-base"

func retryPrefix(b Binding) string { return "lily.retries." + b.Stream + "." + b.Consumer + "." }

func retrySubject(b Binding, seq uint64) string { return retryPrefix(b) + strconv.FormatUint(seq, 10) }

// retryRecord is a retried message's record.
type retryRecord struct {
	headers transport.Headers
	base    uint64
	seq     uint64 // its sequence in the retry stream
}

// readRetry reads the retry record of the message at seq of b's stream.
// errUnreadableRecord marks a retry record that will never be read (not
// Lily's, malformed): unlike a failed request, trying again cannot help.
var errUnreadableRecord = errors.New("unreadable retry record")

func (t *Transport) readRetry(ctx context.Context, b Binding, seq uint64) (retryRecord, bool, error) {
	rs, err := t.stream(ctx, t.opts.RetryStream)
	if err != nil {
		return retryRecord{}, false, err
	}
	raw, err := rs.GetLastMsgForSubject(ctx, retrySubject(b, seq))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return retryRecord{}, false, nil
	}
	if err != nil {
		return retryRecord{}, false, fmt.Errorf("nats: read retry record %s: %w", retrySubject(b, seq), err)
	}
	base, err := strconv.ParseUint(raw.Header.Get(headerRetryBase), 10, 64)
	if err != nil {
		return retryRecord{}, false, fmt.Errorf("nats: retry record %s: %s %q: %w: %w", retrySubject(b, seq), headerRetryBase, raw.Header.Get(headerRetryBase), errUnreadableRecord, err)
	}
	h, err := transport.UnmarshalHeaders(raw.Data)
	if err != nil {
		return retryRecord{}, false, fmt.Errorf("nats: retry record %s: headers: %w: %w", retrySubject(b, seq), errUnreadableRecord, err)
	}
	return retryRecord{headers: h, base: base, seq: raw.Sequence}, true, nil
}

// retryMsg is the retry record of rc's message, published (and confirmed)
// before the message is NAKed.
func retryMsg(rc *receipt, h transport.Headers) (*natsgo.Msg, error) {
	data, err := transport.MarshalHeaders(h)
	if err != nil {
		return nil, fmt.Errorf("nats: retry record of %s: %w", rc.queue, err)
	}
	m := &natsgo.Msg{Subject: retrySubject(rc.b, rc.seq), Header: natsgo.Header{}, Data: data}
	m.Header.Set(headerRetryBase, strconv.FormatUint(rc.delivered, 10))
	return m, nil
}

// dropRetries deletes the retry records of rcs, whose messages are
// settled for good (their acknowledgements confirmed: a record deleted
// before would leave a message that comes back counted with its retries).
// The deletions are requests of their own, sent together and awaited
// together: one round trip for a batch, not one per record. A failure
// leaves an orphan record, which does no harm (no message has that
// sequence any more) and is logged.
func (t *Transport) dropRetries(ctx context.Context, rcs []*receipt) {
	var drop []*receipt
	for _, rc := range rcs {
		if rc.retrySeq != 0 {
			drop = append(drop, rc)
		}
	}
	if len(drop) == 0 {
		return
	}
	rs, err := t.stream(ctx, t.opts.RetryStream)
	if err != nil {
		t.opts.Logger.Warn("nats: could not delete settled messages' retry records", "records", len(drop), "err", err)
		return
	}
	inFlight := make(chan struct{}, maxPipelined)
	var wg sync.WaitGroup
	for _, rc := range drop {
		inFlight <- struct{}{}
		wg.Go(func() {
			defer func() { <-inFlight }()
			if err := rs.DeleteMsg(ctx, rc.retrySeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				t.opts.Logger.Warn("nats: could not delete a settled message's retry record", "queue", rc.queue, "record", retrySubject(rc.b, rc.seq), "err", err)
			}
		})
	}
	wg.Wait()
}

// maxPipelined caps the requests to the server one call keeps in flight
// (record deletions, record reads).
const maxPipelined = 64
