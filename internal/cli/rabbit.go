package cli

import (
	"net/url"
	"time"
)

// rabbitConnectTimeout bounds how long a command waits for the broker.
const rabbitConnectTimeout = 10 * time.Second

// redactedURL hides the password of a broker URL for display.
func redactedURL(u string) string {
	if parsed, err := url.Parse(u); err == nil {
		return parsed.Redacted()
	}
	return "<invalid URL>"
}
