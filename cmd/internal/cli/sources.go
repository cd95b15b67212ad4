package cli

import (
	"context"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport"
)

// ledgerCounters returns the ledger's counters: def (the SQLite store) for
// queues not in cfg, the broker for each [[queue]] that lives on one (url
// and kafkaBrokers, when not empty, override the configuration's). The
// returned function releases the broker connections.
func ledgerCounters(ctx context.Context, def transport.InFlightCounter, cfg config.Config, url, kafkaBrokers string) (*brokers.Counters, func(), error) {
	brk, err := openBrokers(cfg, url, kafkaBrokers)
	if err != nil {
		return nil, func() {}, err
	}
	counters, err := brk.Counters(ctx, def)
	if err != nil {
		return nil, brk.Close, err
	}
	return counters, brk.Close, nil
}
