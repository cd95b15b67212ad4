package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// runSchedule runs 'lily schedule args...' and returns the exit code,
// stdout and stderr.
func runSchedule(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), append([]string{"schedule"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestScheduleJSONDesignExample(t *testing.T) {
	code, out, errs := runSchedule(t, "--attempts", "3", "--backoff-millis", "1000",
		"--max-backoff-millis", "60000", "--jitter", "0.2", "--event-id", "order-42", "--json")
	if code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errs)
	}
	var got scheduleJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	// FNV-1a 64 of "order-42:1", ":2", ":3" mod len(candidates) = 1, 1, 2.
	c1, c2, c3 := int64(1200), int64(2000), int64(4800)
	want := scheduleJSON{
		Retries: []retryJSON{
			{N: 1, Nominal: 1000, Candidates: []int64{1000, 1200}, Chosen: &c1},
			{N: 2, Nominal: 2000, Candidates: []int64{1600, 2000, 2400}, Chosen: &c2},
			{N: 3, Nominal: 4000, Candidates: []int64{3200, 4000, 4800}, Chosen: &c3},
		},
		Buckets: []int64{1000, 1200, 1600, 2000, 2400, 3200, 4000, 4800},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	const raw = `{"retries":[{"n":1,"nominal_ms":1000,"candidates_ms":[1000,1200],"chosen_ms":1200},` +
		`{"n":2,"nominal_ms":2000,"candidates_ms":[1600,2000,2400],"chosen_ms":2000},` +
		`{"n":3,"nominal_ms":4000,"candidates_ms":[3200,4000,4800],"chosen_ms":4800}],` +
		`"buckets_ms":[1000,1200,1600,2000,2400,3200,4000,4800]}` + "\n"
	if out != raw {
		t.Errorf("raw JSON\n got %s\nwant %s", out, raw)
	}
}

func TestScheduleJSONWithoutEventID(t *testing.T) {
	code, out, errs := runSchedule(t, "--attempts", "3", "--json")
	if code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errs)
	}
	var got struct {
		Retries []map[string]any `json:"retries"`
		Buckets []int64          `json:"buckets_ms"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if len(got.Retries) != 3 {
		t.Fatalf("%d retries, want 3: %s", len(got.Retries), out)
	}
	for i, r := range got.Retries {
		if _, ok := r["chosen_ms"]; ok {
			t.Errorf("retry %d has chosen_ms without --event-id: %v", i+1, r)
		}
		if r["n"] != float64(i+1) {
			t.Errorf("retry %d: n = %v", i+1, r["n"])
		}
	}
	if want := []int64{1000, 2000, 4000}; !reflect.DeepEqual(got.Buckets, want) {
		t.Errorf("buckets %v, want %v (defaults backoff 1000, no jitter)", got.Buckets, want)
	}
}

func TestScheduleJSONNoRetries(t *testing.T) {
	// Lily's defaults: 0 attempts.
	code, out, errs := runSchedule(t, "--json", "--jitter", "0.2", "--event-id", "x")
	if code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errs)
	}
	if want := `{"retries":[],"buckets_ms":[]}` + "\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestScheduleHuman(t *testing.T) {
	code, out, errs := runSchedule(t, "--attempts", "3", "--jitter", "0.2", "--event-id", "order-42")
	if code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	want := []string{
		"retry  nominal  candidates              chosen",
		"1      1000ms   1000ms, 1200ms          1200ms",
		"2      2000ms   1600ms, 2000ms, 2400ms  2000ms",
		"3      4000ms   3200ms, 4000ms, 4800ms  4800ms",
		"",
		"buckets (8): 1000ms, 1200ms, 1600ms, 2000ms, 2400ms, 3200ms, 4000ms, 4800ms",
		"retry span: 7000ms (7s) = sum of the nominal delays",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("output\n%s\nwant\n%s", out, strings.Join(want, "\n"))
	}
}

func TestScheduleHumanNoEventIDNoRetries(t *testing.T) {
	code, out, _ := runSchedule(t, "--attempts", "2")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if strings.Contains(out, "chosen") {
		t.Errorf("chosen column without --event-id:\n%s", out)
	}
	if !strings.Contains(out, "retry span: 3000ms (3s)") {
		t.Errorf("missing span:\n%s", out)
	}

	code, out, _ = runSchedule(t)
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, want := range []string{"no retries", "buckets (0): none", "retry span: 0ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestScheduleInvalid(t *testing.T) {
	code, out, errs := runSchedule(t, "--attempts", "101", "--backoff-millis", "1000",
		"--max-backoff-millis", "500", "--jitter", "0.6", "--json")
	if code != 2 {
		t.Fatalf("exit code %d, want 2; stderr %q", code, errs)
	}
	if out != "" {
		t.Errorf("stdout %q, want nothing", out)
	}
	for _, want := range []string{
		"--attempts 101: must be an integer in 0..100",
		"--max-backoff-millis 500: must be >= --backoff-millis (1000)",
		"--jitter 0.6: must be a finite number in 0.0..0.5",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	for _, toml := range []string{"retry_attempts", "retry_jitter_ratio", "retry_backoff_millis"} {
		if strings.Contains(errs, toml) {
			t.Errorf("stderr names %s instead of the flag:\n%s", toml, errs)
		}
	}
}

func TestScheduleInvalidOther(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--jitter", "NaN"}, "--jitter NaN: must be a finite number in 0.0..0.5"},
		{[]string{"--jitter", "-0.1"}, "--jitter -0.1: must be a finite number in 0.0..0.5"},
		{[]string{"--backoff-millis", "0"}, "--backoff-millis 0: must be > 0"},
		{[]string{"--attempts", "-1"}, "--attempts -1: must be an integer in 0..100"},
		{[]string{"--jitter", "abc"}, "--jitter"},
		{[]string{"extra"}, "unknown command"},
		// B=1, M=2^40: 41 distinct doubling delays.
		{[]string{"--attempts", "100", "--backoff-millis", "1", "--max-backoff-millis", "1099511627776"},
			"need 41 delay buckets, at most 32"},
	}
	for _, tt := range tests {
		code, _, errs := runSchedule(t, tt.args...)
		if code != 2 {
			t.Errorf("%v: exit code %d, want 2; stderr %q", tt.args, code, errs)
		}
		if !strings.Contains(errs, tt.want) {
			t.Errorf("%v: stderr %q lacks %q", tt.args, errs, tt.want)
		}
	}
}
