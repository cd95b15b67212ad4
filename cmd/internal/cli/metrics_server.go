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

// serveMetrics serves reg at http://addr/metrics for the command named
// cmd ("lily consume", "lily relay") until stop is called, and says where
// on out. A busy or malformed address is refused before anything runs.
func serveMetrics(cmd, addr string, reg *prometheus.Registry, out io.Writer, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: --metrics %s: %w (pass a free host:port, e.g. 127.0.0.1:9466)", cmd, addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", lilyprom.Handler(reg))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go hs.Serve(ln)
	fmt.Fprintf(out, "%s: metrics on http://%s/metrics\n", cmd, ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	}, nil
}
