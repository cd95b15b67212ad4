package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestScheduleDelayChain: 'lily schedule --delays-millis' shows the
// retry_delays_millis schedule (last delay repeating, jitter clamped to the
// chain's range) and refuses a chain beside --backoff-millis or
// --max-backoff-millis, naming both.
func TestScheduleDelayChain(t *testing.T) {
	code, out, errs := runSchedule(t, "--delays-millis", "10000,60000,600000", "--attempts", "4", "--jitter", "0.2", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var got scheduleJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := scheduleJSON{
		Retries: []retryJSON{
			{N: 1, Nominal: 10000, Candidates: []int64{10000, 12000}},
			{N: 2, Nominal: 60000, Candidates: []int64{48000, 60000, 72000}},
			{N: 3, Nominal: 600000, Candidates: []int64{480000, 600000}},
			{N: 4, Nominal: 600000, Candidates: []int64{480000, 600000}},
		},
		Buckets: []int64{10000, 12000, 48000, 60000, 72000, 480000, 600000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schedule\n got %+v\nwant %+v", got, want)
	}
	// Without --attempts: one retry per delay.
	code, out, _ = runSchedule(t, "--delays-millis", "10000,60000,600000")
	if code != 0 || !strings.Contains(out, "retry span: 670000ms") || !strings.Contains(out, "buckets (3): 10000ms, 60000ms, 600000ms") {
		t.Errorf("exit %d, table:\n%s", code, out)
	}
	for _, other := range [][]string{{"--backoff-millis", "1000"}, {"--max-backoff-millis", "60000"}} {
		code, _, errs := runSchedule(t, append([]string{"--delays-millis", "10000"}, other...)...)
		if code != 2 || !strings.Contains(errs, "--delays-millis and "+other[0]+" are exclusive") {
			t.Errorf("%v: exit %d, stderr %q", other, code, errs)
		}
	}
	code, _, errs = runSchedule(t, "--delays-millis", "1000,0")
	if code != 2 || !strings.Contains(errs, "--delays-millis [1000, 0]: delay 2 is 0") {
		t.Errorf("zero delay: exit %d, stderr %q", code, errs)
	}
}

// TestPlanDelayChain: 'lily plan' takes Lily's chain: 000_*'s 10 s ->
// 1 min -> 10 min, and with more attempts the last delay repeating.
func TestPlanDelayChain(t *testing.T) {
	m := planJSON(t, "outage", "--rate", "2000", "--outage", "600s", "--delays-millis", "10000,60000,600000")
	wantExact(t, m, "attempts", 4)
	wantExact(t, m, "retry_span_s", 670)
	wantExact(t, m, "dead_lettered", 0)
	m = planJSON(t, "outage", "--rate", "2000", "--outage", "3600s", "--delays-millis", "10000,60000,600000", "--attempts", "6")
	if got, want := m["delays_s"], []any{10.0, 60.0, 600.0, 600.0, 600.0}; !reflect.DeepEqual(got, want) {
		t.Errorf("delays_s = %v, want %v (the last delay repeats)", got, want)
	}
	wantExact(t, m, "retry_span_s", 1870)
	wantExact(t, m, "dead_lettered", 2000*(3600-1870))
	code, _, errs := run(t, "plan", "outage", "--rate", "1", "--outage", "1m", "--delays-millis", "1000", "--backoff-millis", "500")
	if code != 2 || !strings.Contains(errs, "--backoff-millis/--max-backoff-millis and --delays-millis are exclusive") {
		t.Errorf("both forms: exit %d, stderr %q", code, errs)
	}
}
