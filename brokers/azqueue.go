package brokers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/azqueue"
)

// AzQueueOptions are the Azure Storage queue transport's options from c:
// the service URL, a shared-key credential for azqueue_account whose key
// is AZURE_STORAGE_KEY (Azurite's development account needs none), or
// AZURE_STORAGE_CONNECTION_STRING when set, which replaces both.
func AzQueueOptions(c config.Config) (azqueue.Options, error) {
	o := azqueue.Options{ServiceURL: c.AzQueueServiceURL(), AccountName: c.AzQueueAccountName(), AccountKey: os.Getenv("AZURE_STORAGE_KEY"),
		VisibilityTimeout: c.AzQueueVisibilityTimeout(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		o.ConnectionString = cs
		return o, nil
	}
	if o.AccountKey == "" {
		if o.AccountName != azqueue.DevAccountName {
			return o, fmt.Errorf("azqueue: no key for storage account %q: set AZURE_STORAGE_KEY (or AZURE_STORAGE_CONNECTION_STRING); the key never goes in the config file", o.AccountName)
		}
		o.AccountKey = azqueue.DevAccountKey
	}
	return o, nil
}

// AzQueue returns the set's Azure Storage queue transport, opened on first
// use.
func (s *Set) AzQueue(context.Context) (*azqueue.Transport, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.azq == nil {
		o, err := AzQueueOptions(s.cfg)
		if err != nil {
			return nil, err
		}
		t, err := azqueue.Open(o)
		if err != nil {
			return nil, err
		}
		s.azq = t
	}
	return s.azq, nil
}
