package rabbitmq_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport/transporttest"
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

// parkCall is one handler call a park child logged: its outcome, or
// "begin" when it started.
type parkCall struct {
	pid, key, outcome string
	seq               int
}

// parkCalls returns the handler calls that ended, in their order.
func parkCalls(t *testing.T, f *fleet) []parkCall {
	t.Helper()
	return slices.DeleteFunc(parkLog(t, f), func(c parkCall) bool { return c.outcome == "begin" })
}

// parkLog returns every line of the park children: begins and ends.
func parkLog(t *testing.T, f *fleet) []parkCall {
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

// sideBySide returns the calls that began while another call of their
// key, in a process not killed since, had not ended: one key handled by
// two at once.
func sideBySide(log []parkCall, killed map[string]bool) []string {
	open := map[string]parkCall{} // key → the call in progress
	var out []string
	for _, c := range log {
		o, busy := open[c.key]
		switch {
		case c.outcome != "begin":
			delete(open, c.key)
		case busy && !killed[o.pid]:
			out = append(out, fmt.Sprintf("%s/%d in process %s began while %s/%d ran in process %s", c.key, c.seq, c.pid, o.key, o.seq, o.pid))
			fallthrough
		default:
			open[c.key] = c
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
	f.start()
	f.start()
	const last = 64
	publish := func(from, to int) {
		t.Helper()
		if err := lily.Publish(ctx, acc, qc.Name, parkMsgs(from, to)); err != nil {
			t.Fatal(err)
		}
	}
	heldK := func() (parked int64, state string) {
		k, err := redrive.NewKeys(cat).HeldKey(ctx, qc.Name, "K")
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
	transporttest.WaitWithin(t, 30*time.Second, "keys A, B, C handled to 4 and K parked behind K/3", func() (bool, string) {
		if ok, why := othersDone(parkCalls(t, f), 4); !ok {
			return false, why
		}
		parked, state := heldK()
		return parked == 1 && state == redrive.KeyHeld, fmt.Sprintf("K %s with %d parked; calls %+v", state, parked, parkCalls(t, f))
	})

	// activeFrom waits until the messages from seq on reach a handler and
	// returns the process that handled the last one: the active one.
	activeFrom := func(seq int) *fleetProc {
		t.Helper()
		var pid string
		transporttest.WaitWithin(t, 30*time.Second, fmt.Sprintf("a handler call of a message from %d on", seq), func() (bool, string) {
			cs := parkCalls(t, f)
			pid = cs[len(cs)-1].pid
			return cs[len(cs)-1].seq >= seq, fmt.Sprintf("last call %+v", cs[len(cs)-1])
		})
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, p := range f.procs {
			if strconv.Itoa(p.cmd.Process.Pid) == pid {
				return p
			}
		}
		t.Fatalf("handler calls from process %s, not one of the children", pid)
		return nil
	}

	// The active process dies while it works through more messages; a new
	// process stands by.
	publish(5, 30)
	victim := activeFrom(5)
	active := strconv.Itoa(victim.cmd.Process.Pid)
	f.kill(victim)
	killed := map[string]bool{active: true}
	killedAt := len(parkCalls(t, f))
	f.start()
	// The next active process is stopped gracefully (a rolling deploy)
	// while its handlers are busy; another stands by. Its successor must
	// not start before it has settled what it holds.
	if err := writeFile(f.dir, "slow"); err != nil {
		t.Fatal(err)
	}
	publish(31, 60)
	f.stop(activeFrom(31))
	if err := os.Remove(filepath.Join(f.dir, "slow")); err != nil {
		t.Fatal(err)
	}
	f.start()
	publish(61, last)
	transporttest.WaitWithin(t, 40*time.Second, "keys A, B, C handled to the end and K's later messages parked", func() (bool, string) {
		if ok, why := othersDone(parkCalls(t, f), last); !ok {
			return false, why
		}
		parked, state := heldK()
		return parked == last-parkHeadSeq && state == redrive.KeyHeld, fmt.Sprintf("K %s with %d parked", state, parked)
	})
	if both := sideBySide(parkLog(t, f), killed); len(both) > 0 {
		t.Errorf("messages of one key handled side by side: %v", both)
	}
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
	target := func(context.Context, string) (redrive.Publisher, error) { return tr, nil }
	if res, err := redrive.NewKeys(cat).Unpark(ctx, redrive.UnparkParams{Queue: qc.Name, Key: "K", Target: target}); err != nil || res.Action != "redrive_head" {
		t.Fatalf("unpark K = %+v, %v; want redrive_head", res, err)
	}
	transporttest.WaitWithin(t, 40*time.Second, "K handled to the end and free", func() (bool, string) {
		got := firstsOK(parkCalls(t, f), "K")
		_, state := heldK()
		return len(got) == last && state == "free", fmt.Sprintf("K %s, handled %v", state, got)
	})
	f.stopAll(true)
	if both := sideBySide(parkLog(t, f), killed); len(both) > 0 {
		t.Errorf("messages of one key handled side by side after the unpark: %v", both)
	}
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
	n := int64(len(parkKeys) * last)
	settledLedger(t, cat, acc, ledger.Row{Queue: qc.Name, Accepted: n, Acked: n})
}
