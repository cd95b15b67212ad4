package retry

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Limits on the number of delay buckets (docs/design.md §5). Every bucket is
// a physical queue or topic on the broker, so they are bounded per queue and
// for the whole topology.
const (
	// MaxBucketsPerQueue is the most distinct buckets one queue may need.
	MaxBucketsPerQueue = 32
	// MaxBucketsPerTopology is the most buckets all queues together may
	// need; buckets of different queues are different physical queues even
	// when their delays are equal, so the per-queue counts add up.
	MaxBucketsPerTopology = 4096
)

// ErrTooManyBuckets is wrapped, together with ErrInvalidPolicy, by the
// errors of CheckBuckets and CheckTopology.
var ErrTooManyBuckets = errors.New("too many retry buckets")

// CheckBuckets returns an error wrapping ErrInvalidPolicy and
// ErrTooManyBuckets when the policy p of the queue named queue needs more
// than MaxBucketsPerQueue buckets; the message names the queue and the
// count. It returns nil otherwise. It does not call Validate.
func CheckBuckets(queue string, p Policy) error {
	n := len(p.Buckets())
	if n <= MaxBucketsPerQueue {
		return nil
	}
	return fmt.Errorf("%w: %w: queue %q needs %d retry buckets, at most %d are allowed; "+
		"%s",
		ErrInvalidPolicy, ErrTooManyBuckets, queue, n, MaxBucketsPerQueue, bucketFix(p))
}

// CheckTopology takes the number of buckets of each queue of a topology,
// keyed by queue name (typically len(p.Buckets()) of each queue's policy),
// and returns an error wrapping ErrInvalidPolicy and ErrTooManyBuckets when
// their sum exceeds MaxBucketsPerTopology. The message names the total, the
// number of queues and the queues with the most buckets. It returns nil
// otherwise.
func CheckTopology(bucketsPerQueue map[string]int) error {
	total := 0
	names := make([]string, 0, len(bucketsPerQueue))
	for q, n := range bucketsPerQueue {
		total += n
		names = append(names, q)
	}
	if total <= MaxBucketsPerTopology {
		return nil
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := bucketsPerQueue[b] - bucketsPerQueue[a]; d != 0 {
			return d
		}
		return cmp.Compare(a, b)
	})
	const shown = 3
	top := ""
	for i, q := range names {
		if i == shown {
			top += ", ..."
			break
		}
		if i > 0 {
			top += ", "
		}
		top += fmt.Sprintf("%s %d", q, bucketsPerQueue[q])
	}
	return fmt.Errorf("%w: %w: the topology needs %d retry buckets across %d queues, "+
		"at most %d are allowed (largest: %s)",
		ErrInvalidPolicy, ErrTooManyBuckets, total, len(names), MaxBucketsPerTopology, top)
}

// bucketFix says which settings lower a policy's bucket count.
func bucketFix(p Policy) string {
	if p.Chain() {
		return "shorten retry_delays_millis (fewer distinct delays) or lower retry_jitter_ratio"
	}
	return "lower retry_attempts, retry_jitter_ratio or max_retry_backoff_millis"
}
