// Package azuritetest finds the Azurite queue service (the Azure Storage
// emulator, npm package azurite) for tests and demos. .ci/run installs a
// pinned Azurite and starts it on 127.0.0.1:10001; a test that needs it
// and does not find it fails under CI=true, and is skipped with a loud
// message elsewhere.
package azuritetest

import (
	"context"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	sdk "github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/lily-mq/lily/transport/azqueue"
)

// DefaultURL is Azurite's queue endpoint for its development account, as
// .ci/run starts it.
const DefaultURL = azqueue.AzuriteURL

// URL is the service URL of the test Azurite: LILY_TEST_AZURITE_URL, or
// DefaultURL.
func URL() string {
	if u := os.Getenv("LILY_TEST_AZURITE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Reachable reports whether something listens at URL()'s host and port
// (nil), or why not.
func Reachable() error {
	u, err := url.Parse(URL())
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// Options returns transport options for the test Azurite (its development
// account) with the given visibility timeout and a short poll interval.
// It fails t under CI=true when Azurite is not reachable, and skips it
// loudly otherwise.
func Options(t testing.TB, visibility time.Duration) azqueue.Options {
	t.Helper()
	if err := Reachable(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Azurite is not reachable at %s (CI=true: .ci/run installs and starts it): %v", URL(), err)
		}
		t.Skipf("SKIPPED — Azurite is not reachable at %s: %v (start it: npx -p azurite@3.37.0 azurite-queue --inMemoryPersistence --skipApiVersionCheck, or set LILY_TEST_AZURITE_URL)", URL(), err)
	}
	return azqueue.Options{ServiceURL: URL(), AccountName: azqueue.DevAccountName, AccountKey: azqueue.DevAccountKey,
		VisibilityTimeout: visibility, PollInterval: 100 * time.Millisecond}
}

// FunctionsRuntime does what the Azure Functions queue trigger does with a
// message its function keeps failing: it dequeues it, the function fails,
// and the message is made visible again, until its DequeueCount reaches
// maxDequeueCount; then its text is put on "<queue>-poison" and the
// original deleted. It returns when the trigger queue is empty.
func FunctionsRuntime(ctx context.Context, t *testing.T, svc *sdk.ServiceClient, queue string, maxDequeueCount int64) {
	t.Helper()
	q, poison := svc.NewQueueClient(queue), svc.NewQueueClient(queue+"-poison")
	vis := int32(30)
	for {
		out, err := q.DequeueMessage(ctx, &sdk.DequeueMessageOptions{VisibilityTimeout: &vis})
		if err != nil {
			t.Fatalf("functions runtime: dequeue: %v", err)
		}
		if len(out.Messages) == 0 {
			return
		}
		m := out.Messages[0]
		// The function throws; the runtime looks at the count.
		if *m.DequeueCount >= maxDequeueCount {
			if _, err := poison.EnqueueMessage(ctx, *m.MessageText, nil); err != nil {
				t.Fatalf("functions runtime: move to poison: %v", err)
			}
			if _, err := q.DeleteMessage(ctx, *m.MessageID, *m.PopReceipt, nil); err != nil {
				t.Fatalf("functions runtime: delete: %v", err)
			}
			continue
		}
		if _, err := q.UpdateMessage(ctx, *m.MessageID, *m.PopReceipt, *m.MessageText, nil); err != nil { // visible again at once
			t.Fatalf("functions runtime: release: %v", err)
		}
	}
}

// DeleteQueuesAtEnd deletes queue and the queues Lily made for it (its
// dead-letter queue) on the Azurite of o when t ends.
func DeleteQueuesAtEnd(t testing.TB, o azqueue.Options, queue string) {
	t.Helper()
	t.Cleanup(func() {
		tr, err := azqueue.Open(o)
		if err != nil {
			t.Error(err)
			return
		}
		defer tr.Close()
		if err := tr.DeleteQueues(context.Background(), queue); err != nil {
			t.Errorf("delete the queues of %s: %v", queue, err)
		}
	})
}
