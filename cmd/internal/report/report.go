// Package report is how Lily's commands print what they found: the
// ledger as 'lily reconcile' shows it, indented JSON for --json, and
// broker URLs without their passwords. 'lily' and 'lily-demo' print the
// same way because they share it.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/lily-mq/lily/ledger"
)

// Ledger prints the ledger's rows as an aligned table, one queue a line.
func Ledger(w io.Writer, rows []ledger.Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\taccepted\tacked\tdead-lettered\tdiscarded\tin-flight\t(ready\tretrying\tunacked\tdlx)\tlost\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t(%d\t%d\t%d\t%d)\t%d\t\n", r.Queue, r.Accepted, r.Acked, r.DeadLettered, r.Discarded,
			r.InFlight, r.InFlightReady, r.InFlightRetrying, r.InFlightUnacked, r.InFlightDLX, r.Lost)
	}
	tw.Flush()
}

// JSON writes v as indented JSON, the output of every --json.
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// RedactedURL hides the password of a broker or database URL for display.
func RedactedURL(u string) string {
	if parsed, err := url.Parse(u); err == nil {
		return parsed.Redacted()
	}
	return "<invalid URL>"
}
