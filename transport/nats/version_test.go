package nats_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestOldServer: servers before nats.MinServerVersion are named, with the
// defects and the fix; later ones, pre-releases of later ones and versions
// that cannot be read are not.
func TestOldServer(t *testing.T) {
	for v, old := range map[string]bool{
		"2.9.10": true, "2.10.21": true, "2.10.0": true, "1.4.1": true,
		"2.10.22": false, "2.10.29": false, "2.11.0-RC.1": false, "v2.14.5": false, "3.0.0": false,
		"": false, "2.10": false, "next": false,
	} {
		why := nats.OldServer(v)
		if (why != "") != old {
			t.Errorf("OldServer(%q) = %q, want old %v", v, why, old)
		}
		if old && (!strings.Contains(why, nats.MinServerVersion) || !strings.Contains(why, "upgrade")) {
			t.Errorf("OldServer(%q) = %q: want the minimum version and the fix", v, why)
		}
	}
}

// TestOpenWarnsOnOldServer: Open warns once when the server it connected
// to is older than nats.MinServerVersion — checked on the machine's server
// (nats-server 2.9.10 on the project's machines) and on the tests' own
// server, which is not old.
func TestOpenWarnsOnOldServer(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]string{"machine": natstest.MachineURL(t), "tests": natstest.URL(t)} {
		var buf transporttest.SyncBuffer
		tr, err := nats.Open(nats.Options{URL: url, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatalf("%s server: %v", name, err)
		}
		version := tr.Conn().ConnectedServerVersion()
		tr.Close()
		warned := strings.Count(buf.String(), "is older than "+nats.MinServerVersion)
		want := 0
		if nats.OldServer(version) != "" {
			want = 1
		}
		if warned != want {
			t.Errorf("%s server %s: %d warnings of an old server, want %d; log:\n%s", name, version, warned, want, buf.String())
		}
		if name == "tests" && want != 0 {
			t.Errorf("the tests' server %s is older than %s: the tests would see its defects", version, nats.MinServerVersion)
		}
	}
}
