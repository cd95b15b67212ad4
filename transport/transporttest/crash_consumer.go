package transporttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// CrashConsumer is the consumer of a crash test's child process (see
// RunCrashChildren): it consumes qc's queue on tr until nothing is in
// flight (tr must count it: transport.InFlightCounter), appending the event
// ID of each message it acknowledges to the file logPath. The body
// "poison" kills the process mid-handler (CrashExitCode, no recover sees
// it), a body ending in "/permanent" fails permanently, and every other
// call takes pause (it simulates the handler's work). It returns the
// process's exit code: 0 when the queue went quiet, 3 on any other error.
func CrashConsumer(tr transport.Transport, qc lily.QueueConfig, logPath string, pause time.Duration) int {
	counter, ok := tr.(transport.InFlightCounter)
	if !ok {
		fmt.Fprintln(os.Stderr, "transporttest: the crash consumer's transport counts no in-flight messages")
		return 3
	}
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer f.Close()
	var mu sync.Mutex
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if string(d.Body) == "poison" {
			os.Exit(CrashExitCode) // no recover sees it
		}
		if strings.HasSuffix(string(d.Body), "/permanent") {
			return lily.Permanent(errors.New("bad order"))
		}
		time.Sleep(pause) // simulates the handler's work
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, "%s\n", d.EventID)
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 10, ReceiveWait: time.Second,
		Instance: fmt.Sprintf("crash-%d", os.Getpid()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go CancelWhenIdle(ctx, counter, qc.Name, 50*time.Millisecond, cancel)
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}
