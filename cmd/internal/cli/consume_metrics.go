package cli

import (
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily/lilyprom"
)

// serveConsumeMetrics serves the runtime metrics of 'lily consume' on
// addr: a lilyprom.Hook, returned for the consumer's options, with the
// queue's series created at zero so that rate() sees the queue before its
// first message. The address is printed on stderr (the standard output
// may be --json). stop shuts the server down.
func serveConsumeMetrics(addr, queue string, stderr io.Writer, logger *slog.Logger) (*lilyprom.Hook, func(), error) {
	reg := prometheus.NewRegistry()
	hook, err := lilyprom.NewHook(reg)
	if err != nil {
		return nil, nil, err
	}
	hook.Init(queue)
	stop, err := serveMetrics("lily consume", addr, reg, stderr, logger)
	if err != nil {
		return nil, nil, err
	}
	return hook, stop, nil
}
