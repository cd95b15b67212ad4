package nats

import (
	"fmt"
	"strconv"
	"strings"
)

// MinServerVersion is the oldest nats-server whose pull consumers count
// deliveries as Lily needs (docs/nats.md). Older servers have two defects
// fixed in 2.10.16 and 2.10.22 (nats-io/nats-server#5338, #5995): a message
// sent to a pull request the server then dropped came back with its
// NumDelivered wrong, or not until AckWait, and redelivered counts were
// misreported. Lily's retry and crash counting read NumDelivered, so on
// such a server a message can be handed out twice with one count, or
// dead-lettered for delivery_limit a delivery early.
const MinServerVersion = "2.10.22"

// OldServer reports whether version (as the server announces it, e.g.
// "2.9.10" or "2.11.0-RC.1") is older than MinServerVersion, and says why
// it matters; "" when it is not older or cannot be read.
func OldServer(version string) string {
	if !versionBefore(version, MinServerVersion) {
		return ""
	}
	return fmt.Sprintf("nats-server %s is older than %s: its pull consumers can report a redelivery's NumDelivered wrong (nats-io/nats-server#5338, #5995), so a message can be handed out twice with one count or dead-lettered for delivery_limit a delivery early; upgrade the server to %s or later",
		version, MinServerVersion, MinServerVersion)
}

// versionBefore compares dotted release versions numerically, ignoring a
// pre-release suffix; a version it cannot read is not before anything.
func versionBefore(a, b string) bool {
	pa, oka := parseVersion(a)
	pb, okb := parseVersion(b)
	if !oka || !okb {
		return false
	}
	for i := range 3 {
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	return false
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}
