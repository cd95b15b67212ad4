package cli

import (
	"context"
	"fmt"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/brokers/livelint"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
)

// lintLiveAzQueue runs the Azure Storage queue live checks when the
// configuration names a storage account (azqueue_url, an azqueue queue or
// a [[foreign_dlq]] kind = "azure-functions"); false when it names none.
func lintLiveAzQueue(ctx context.Context, cfg config.Config) ([]lint.Finding, bool, error) {
	has := cfg.AzQueueURL != ""
	for _, q := range cfg.Queues {
		has = has || q.Transport == lily.TransportAzQueue
	}
	for _, f := range cfg.ForeignDLQs {
		has = has || f.Kind == config.ForeignAzureFunctions
	}
	if !has {
		return nil, false, nil
	}
	b := brokers.New(cfg, brokers.Options{})
	defer b.Close()
	t, err := b.AzQueue(ctx)
	if err != nil {
		return nil, true, err
	}
	names, err := livelint.ReadStorageQueues(ctx, t)
	if err != nil {
		return nil, true, fmt.Errorf("lint --live: %w", err)
	}
	return livelint.CheckFunctions(cfg, names), true, nil
}
