package demo

import (
	"fmt"
	"os"
	"time"

	"github.com/lily-mq/lily/transport/azqueue"
)

// azqueueVisibility is the demo's Storage queue visibility timeout: a dead
// worker's messages come back after it (the service has no consumer
// connection whose death returns them at once), DequeueCount raised.
const azqueueVisibility = 2 * time.Second

// azqueueBackend is the demo's Azure Storage queue service: --url when it
// is an http(s) URL, else Azurite's default endpoint
// (azqueue.AzuriteURL). The credential is AZURE_STORAGE_CONNECTION_STRING
// when set, else Azurite's development account.
type azqueueBackend struct {
	url string
	tr  *azqueue.Transport
}

// azqueueURL is the service of --url: an http(s) URL as given, else
// (--url's AMQP default) Azurite's.
func azqueueURL(url string) string {
	if isHTTP(url) {
		return url
	}
	return azqueue.AzuriteURL
}

// openAzQueueBackend opens the transport of conn's service.
func openAzQueueBackend(conn connection) (*azqueueBackend, error) {
	s := &azqueueBackend{url: azqueueURL(conn.url)}
	o := azqueue.Options{ServiceURL: s.url, AccountName: azqueue.DevAccountName, AccountKey: azqueue.DevAccountKey,
		VisibilityTimeout: azqueueVisibility, PollInterval: 50 * time.Millisecond}
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		o.ConnectionString = cs
	}
	tr, err := azqueue.Open(o)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	s.tr = tr
	return s, nil
}

// Close closes the transport.
func (s *azqueueBackend) Close() { s.tr.Close() }

// where describes the service for the demo's first line.
func (s *azqueueBackend) where() string { return "Azure Storage queues (" + s.url + ")" }
