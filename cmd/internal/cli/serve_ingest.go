package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily/ingest"
	"github.com/lily-mq/lily/lilyprom"
)

// ingestOptions are the flags of the continuous ingest of 'lily serve'.
type ingestOptions struct {
	off      bool          // --no-ingest
	interval time.Duration // --ingest-interval
	leaseTTL time.Duration // --ingest-lease-ttl
}

// validate checks the flags, naming them (ingest.New checks the same).
func (o ingestOptions) validate() error {
	if o.off {
		return nil
	}
	switch {
	case o.interval < ingest.MinInterval:
		return usagef("--ingest-interval %s: must be at least %s (default %s)", o.interval, ingest.MinInterval, ingest.DefaultInterval)
	case o.leaseTTL < 2*o.interval:
		return usagef("--ingest-lease-ttl %s: must be at least twice --ingest-interval %s, so that the holder renews its lease before it runs out (default %s)",
			o.leaseTTL, o.interval, ingest.DefaultLeaseTTL)
	}
	return nil
}

// newIngestLoop returns the continuous ingest of the configuration's
// broker queues and [[foreign_dlq]] queues, its metrics registered with
// reg; nil when --no-ingest or when there is nothing to drain. The
// returned function closes its broker connections (after the loop
// stopped).
func newIngestLoop(ctx context.Context, o serveOptions, env *dlqEnv, reg prometheus.Registerer, hook *lilyprom.Hook, logger *slog.Logger) (*ingest.Loop, func(), error) {
	if o.ingest.off {
		return nil, func() {}, nil
	}
	brk, err := openBrokers(env.cfg, o.url, o.kbrk)
	if err != nil {
		return nil, func() {}, err
	}
	srcs, err := brk.Sources(ctx)
	if err != nil {
		return nil, brk.Close, err
	}
	sources := map[string]ingest.Source{}
	for q, s := range srcs {
		sources[q] = ingest.Source{Drainer: s}
	}
	if env.hasCfg {
		for _, f := range env.cfg.ForeignDLQs { // [[foreign_dlq]]: drained like Lily's own (dlq_foreign.go)
			fd, err := foreignDrainer(ctx, brk, f)
			if err != nil {
				return nil, brk.Close, err
			}
			sources[f.Queue] = ingest.Source{Drainer: fd, Foreign: f.Kind, Reason: f.Reason()}
		}
	}
	if len(sources) == 0 {
		return nil, brk.Close, nil
	}
	m, err := lilyprom.NewIngestMetrics(reg)
	if err != nil {
		return nil, brk.Close, err
	}
	l, err := ingest.New(ingest.Options{Catalog: env.cat, Sources: sources, Interval: o.ingest.interval, LeaseTTL: o.ingest.leaseTTL,
		Logger: logger, Metrics: m, Hook: hook})
	if err != nil {
		return nil, brk.Close, err
	}
	return l, brk.Close, nil
}
