package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

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
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("consume: --metrics %s: %w (pass a free host:port, e.g. 127.0.0.1:9466)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", lilyprom.Handler(reg))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go hs.Serve(ln)
	fmt.Fprintf(stderr, "lily consume: metrics on http://%s/metrics\n", ln.Addr())
	return hook, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	}, nil
}
