// Package azuritetest finds the Azurite queue service (the Azure Storage
// emulator, npm package azurite) for tests and demos. .ci/run installs a
// pinned Azurite and starts it on 127.0.0.1:10001; a test that needs it
// and does not find it fails under CI=true, and is skipped with a loud
// message elsewhere.
package azuritetest

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"

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
		t.Skipf("SKIPPED — Azurite is not reachable at %s: %v (start it: npx azurite-queue --inMemoryPersistence --skipApiVersionCheck, or set LILY_TEST_AZURITE_URL)", URL(), err)
	}
	return azqueue.Options{ServiceURL: URL(), AccountName: azqueue.DevAccountName, AccountKey: azqueue.DevAccountKey,
		VisibilityTimeout: visibility, PollInterval: 100 * time.Millisecond}
}
