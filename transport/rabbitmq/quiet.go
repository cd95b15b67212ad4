package rabbitmq

import (
	"context"
	"time"
)

// Closing a channel right after a burst of acknowledgements can lose some
// of them on a quorum queue (rabbitmq-server#10327, open, seen here on
// 3.10.8): the channel's quorum-queue client sends each basic.ack as a Raft
// command, and past its soft limit of unapplied commands (32 by default)
// it stashes further settlements, to be sent once the queue has applied
// enough of the earlier ones. A channel that closes meanwhile drops the
// stash, and the queue returns those messages — handled, acknowledged —
// with their counts raised, to be handled again. A graceful hand-over saw
// it: 8 to 21 of 80 messages handled twice in 3 of 100 runs, every
// acknowledgement written without error before the close.
//
// A consumer's channel is fenced before it closes (fence.go); the quiet
// wait below remains for what cannot be fenced (a per-key order queue, a
// fence that failed). The stash empties within milliseconds on a healthy
// queue, and without a fence nothing an AMQP client can ask tells when it
// did. So a consumer channel that
// settled a burst (settleBurst frames, each less than settleQuiet after the
// one before) is closed no sooner than settleQuiet after the last of them:
// a graceful stop of a busy consumer takes up to settleQuiet longer. A
// burst past the soft limit (settleSoftLimit frames) has certainly been
// stashed in part, and the stash goes out only once the queue has applied
// the earlier commands — a Raft write, which takes longer than settleQuiet
// on a loaded broker (a CI run on this machine: a hand-over gave back 53
// deliveries, 53 ack frames, and 19 of them came back counted twice after
// 500 ms) — so that channel waits settleQuietLong.

// settleBurst is how many settlement frames in quick succession may have
// filled the quorum-queue client's command buffer.
const settleBurst = 8

// settleQuiet is how long a channel that settled a burst stays open after
// its last settlement.
const settleQuiet = 500 * time.Millisecond

// settleSoftLimit is the quorum-queue client's soft limit of unapplied
// commands (RabbitMQ's quorum_commands_soft_limit, 32 by default): past
// it, settlements are stashed.
const settleSoftLimit = 32

// settleQuietLong is how long a channel stays open after a burst past
// settleSoftLimit.
const settleQuietLong = 2 * time.Second

// settleClock remembers a channel's recent settlement frames.
type settleClock struct {
	last   time.Time
	recent int
	// unfenced counts the settlement frames sent since the channel opened
	// or its last fence (see fence.go).
	unfenced int
}

// note records n settlement frames sent now.
func (s *settleClock) note(n int) {
	s.unfenced += n
	now := time.Now()
	if now.Sub(s.last) > settleQuiet {
		s.recent = 0
	}
	s.recent += n
	s.last = now
}

// wait is how long the channel should stay open before it is closed.
func (s *settleClock) wait() time.Duration {
	quiet := settleQuiet
	switch {
	case s.recent < settleBurst:
		return 0
	case s.recent >= settleSoftLimit:
		quiet = settleQuietLong
	}
	return max(0, quiet-time.Since(s.last))
}

// quietWait returns how long c's channel should stay open before it is
// closed (see settleClock).
func (c *consumer) quietWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.settled.wait()
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
