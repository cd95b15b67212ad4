package rabbitmq_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
)

// parkHeadSeq is the message of key K that fails permanently in the park
// fleet test until the fix is deployed.
const parkHeadSeq = 3

// parkKeys are the keys of the park fleet test; K is the one held.
var parkKeys = []string{"A", "B", "C", "K"}

// parseParkBody splits a park test body "KEY/SEQ".
func parseParkBody(b string) (key string, seq int, ok bool) {
	k, s, found := strings.Cut(b, "/")
	n, err := strconv.Atoi(s)
	return k, n, found && err == nil
}

// parkMsgs are the messages from..to (inclusive) of every key,
// interleaved: A/from, B/from, C/from, K/from, A/from+1, …
func parkMsgs(from, to int) []lily.Message {
	var out []lily.Message
	for seq := from; seq <= to; seq++ {
		for _, k := range parkKeys {
			out = append(out, lily.Message{Key: k, Body: fmt.Appendf(nil, "%s/%d", k, seq)})
		}
	}
	return out
}

// parkCall is one handler call a park child logged.
type parkCall struct {
	pid, key, outcome string
	seq               int
}

func parkCalls(t *testing.T, f *fleet) []parkCall {
	t.Helper()
	var out []parkCall
	for _, l := range f.handled() {
		if len(l) != 4 {
			t.Fatalf("handled.log line %q: want PID KEY SEQ OUTCOME", strings.Join(l, " "))
		}
		seq, err := strconv.Atoi(l[2])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parkCall{pid: l[0], key: l[1], seq: seq, outcome: l[3]})
	}
	return out
}

// firstsOK returns key's sequence numbers in the order of their first
// successful handling (an at-least-once duplicate after it left out).
func firstsOK(calls []parkCall, key string) []int {
	var out []int
	for _, c := range calls {
		if c.key == key && c.outcome == "ok" && !slices.Contains(out, c.seq) {
			out = append(out, c.seq)
		}
	}
	return out
}

// keyCalls describes key's calls, "pid:seq:outcome" each, in their order.
func keyCalls(calls []parkCall, key string) []string {
	var out []string
	for _, c := range calls {
		if c.key == key {
			out = append(out, fmt.Sprintf("%s:%d:%s", c.pid, c.seq, c.outcome))
		}
	}
	return out
}

// seqs is 1..n.
func seqs(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// TestFleetParkAcrossProcesses: ordering park on one queue with two
// consumer processes on one PostgreSQL catalog (the broker lets one of
// them consume at a time: single active consumer). K/3 fails permanently,
// so the active process parks K. That process is killed with SIGKILL
// while it works through more messages; the other takes over and must
// keep diverting K's later messages — it reads the held key from
// PostgreSQL — while the other keys flow in order; the killed process is
// started again and stands by. Then the fix is deployed, the DLQ ingested
// and K unparked from this process: K's messages reach a handler in their
// order 1, 2, 3, 4, …, and the ledger balances.
func TestFleetParkAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := fleetQueueConfig("park", randomName("fleet.park"))
	tr, cat, url, acc := openFleetCatalog(t, qc)
	f := newFleet(t, "park", qc.Name, url)
	procs := []*fleetProc{f.start(), f.start()}
	const last = 34
	publish := func(from, to int) {
		t.Helper()
		if err := lily.Publish(ctx, acc, qc.Name, parkMsgs(from, to)); err != nil {
			t.Fatal(err)
		}
	}
	heldK := func() (parked int64, state string) {
		k, err := cat.HeldKey(ctx, qc.Name, "K")
		if err != nil {
			t.Fatal(err)
		}
		if k == nil {
			return 0, "free"
		}
		return k.Parked, k.State
	}
	othersDone := func(calls []parkCall, n int) (bool, string) {
		for _, k := range parkKeys[:3] {
			if got := firstsOK(calls, k); len(got) < n {
				return false, fmt.Sprintf("key %s handled %v", k, got)
			}
		}
		return true, ""
	}

	publish(1, 4)
	waitUntil(t, "keys A, B, C handled to 4 and K parked behind K/3", 30*time.Second, func() (bool, string) {
		if ok, why := othersDone(parkCalls(t, f), 4); !ok {
			return false, why
		}
		parked, state := heldK()
		return parked == 1 && state == catalog.KeyHeld, fmt.Sprintf("K %s with %d parked; calls %+v", state, parked, parkCalls(t, f))
	})

	// The active process dies while it works through more messages.
	publish(5, 30)
	var active string
	waitUntil(t, "the active process handling the second batch", 30*time.Second, func() (bool, string) {
		cs := parkCalls(t, f)
		active = cs[len(cs)-1].pid
		return cs[len(cs)-1].seq >= 5, fmt.Sprintf("last call %+v", cs[len(cs)-1])
	})
	var victim *fleetProc
	for _, p := range procs {
		if strconv.Itoa(p.cmd.Process.Pid) == active {
			victim = p
		}
	}
	if victim == nil {
		t.Fatalf("handler calls from process %s, not one of the children", active)
	}
	f.kill(victim)
	killedAt := len(parkCalls(t, f))
	f.start() // a new process stands by
	publish(31, last)
	waitUntil(t, "keys A, B, C handled to the end and K's later messages parked", 40*time.Second, func() (bool, string) {
		if ok, why := othersDone(parkCalls(t, f), last); !ok {
			return false, why
		}
		parked, state := heldK()
		return parked == last-parkHeadSeq && state == catalog.KeyHeld, fmt.Sprintf("K %s with %d parked", state, parked)
	})
	calls := parkCalls(t, f)
	for _, k := range parkKeys[:3] {
		if got := firstsOK(calls, k); !slices.Equal(got, seqs(last)) {
			t.Errorf("key %s handled in order %v, want 1..%d; calls (the killed process was %s): %v", k, got, last, active, keyCalls(calls, k))
		}
	}
	for _, c := range calls {
		if c.key == "K" && c.seq > parkHeadSeq {
			t.Fatalf("K/%d reached a handler (process %s) while K was parked", c.seq, c.pid)
		}
	}
	for _, c := range calls[killedAt:] {
		if c.pid == active {
			t.Fatalf("handler call %+v from the killed process", c)
		}
	}

	// The fix is deployed; the head is ingested and K unparked.
	if err := writeFile(f.dir, "fixed"); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.Ingest(ctx, acc, qc.Name); err != nil {
		t.Fatal(err)
	}
	target := func(context.Context, string) (catalog.Publisher, error) { return tr, nil }
	if res, err := cat.Unpark(ctx, catalog.UnparkParams{Queue: qc.Name, Key: "K", Target: target}); err != nil || res.Action != "redrive_head" {
		t.Fatalf("unpark K = %+v, %v; want redrive_head", res, err)
	}
	waitUntil(t, "K handled to the end and free", 40*time.Second, func() (bool, string) {
		got := firstsOK(parkCalls(t, f), "K")
		_, state := heldK()
		return len(got) == last && state == "free", fmt.Sprintf("K %s, handled %v", state, got)
	})
	f.stopAll(true)
	calls = parkCalls(t, f)
	if got := firstsOK(calls, "K"); !slices.Equal(got, seqs(last)) {
		t.Errorf("K handled in order %v, want 1..%d", got, last)
	}
	// Nothing of K after its head reached a handler before the head's
	// successful call.
	headOK := slices.IndexFunc(calls, func(c parkCall) bool { return c.key == "K" && c.seq == parkHeadSeq && c.outcome == "ok" })
	for i, c := range calls[:headOK] {
		if c.key == "K" && c.seq > parkHeadSeq {
			t.Errorf("call %d: K/%d reached a handler before K/%d succeeded", i, c.seq, parkHeadSeq)
		}
	}
	row := ledgerRow(t, cat, acc, qc.Name)
	n := int64(len(parkKeys) * last)
	if want := (catalog.LedgerRow{Queue: qc.Name, Accepted: n, Acked: n}); row != want {
		t.Errorf("ledger = %+v, want %+v", row, want)
	}
}
