package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
)

// TestTopologyNATS: plan lists the contract's names without a server;
// apply declares them; verify finds them as planned, and reports a
// consumer deleted behind Lily's back with exit 1.
func TestTopologyNATS(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	queue := fmt.Sprintf("topo.nats.%d", time.Now().UnixNano())
	cfg := writeConfig(t, fmt.Sprintf("nats_url = %q\n[[queue]]\nname = %q\ntransport = \"nats\"\n", url, queue))
	stream := nats.StreamName(queue)
	t.Cleanup(func() {
		tr, err := nats.Open(nats.Options{URL: url})
		if err == nil {
			defer tr.Close()
			tr.JetStream().DeleteStream(context.Background(), stream)
			tr.JetStream().DeleteStream(context.Background(), nats.DeadLetterStream(queue))
		}
	})
	code, out, errOut := run(t, "topology", "plan", "--config", cfg)
	if code != 0 || !strings.Contains(out, stream) || !strings.Contains(out, nats.DeadLetterStream(queue)) || !strings.Contains(out, nats.DefaultRetryStream) {
		t.Fatalf("plan exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 {
		t.Fatalf("apply exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "verify", "--config", cfg); code != 0 || !strings.Contains(out, "topology OK") {
		t.Fatalf("verify after apply: exit %d\n%s\n%s", code, out, errOut)
	}
	tr, err := nats.Open(nats.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.JetStream().DeleteConsumer(context.Background(), stream, nats.DefaultConsumer); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, "topology", "verify", "--config", cfg)
	if code != 1 || !strings.Contains(out, "nats consumer lily on "+stream+": missing, want exists") {
		t.Errorf("verify with the consumer deleted: exit %d\n%s", code, out)
	}
}
