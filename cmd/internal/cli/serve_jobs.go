package cli

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/httpapi"
	"github.com/lily-mq/lily/redrive"
)

// startJobRunner runs, until the returned stop is called, the redrive job
// runner of 'lily serve': it takes the queued jobs and those a dead
// process left behind (their lease ran out) and runs them to their end,
// after their last handled entry (redrive.Redriver.RunJobs). Several serve
// replicas share the jobs; each runs one at a time. On stop the job in hand
// is released, not cancelled, so that the next runner resumes it at once.
func startJobRunner(ctx context.Context, env *dlqEnv, targets *redriveTargets, redrives httpapi.RedriveObserver, logger *slog.Logger, lease time.Duration, tp trace.TracerProvider) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Look for orphaned jobs at least as often as a lease runs out.
		p := redrive.RunnerParams{Logger: logger, Interval: min(2*time.Second, lease/2), JobRunParams: redrive.JobRunParams{
			Holder: runnerName("serve"), Lease: lease, Target: targets.target, MaxRedrives: env.maxRedrives, Tick: targets.ingest,
		}}
		if redrives != nil {
			p.OnEntry = func(e catalog.EntryRef, outcome string) { redrives.Redrive(e.Queue, outcome) }
		}
		rd := redrive.New(env.cat)
		rd.TracerProvider = tp // nil: not traced
		_ = rd.RunJobs(ctx, p)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}
