package plan

import (
	"reflect"
	"strings"
	"testing"
)

// The table printed by esik-secimi.mjs in seed 003.
var seed003 = []ThresholdRow{
	{Threshold: 1, Processed: 9, WastedAttempts: 11, WronglyIsolated: 9, PermanentlyFailingIsolated: 2},
	{Threshold: 2, Processed: 9, WastedAttempts: 22, WronglyIsolated: 9, PermanentlyFailingIsolated: 2},
	{Threshold: 3, Processed: 14, WastedAttempts: 28, WronglyIsolated: 4, PermanentlyFailingIsolated: 2},
	{Threshold: 5, Processed: 18, WastedAttempts: 36, WronglyIsolated: 0, PermanentlyFailingIsolated: 2},
	{Threshold: 8, Processed: 18, WastedAttempts: 42, WronglyIsolated: 0, PermanentlyFailingIsolated: 2},
}

func TestThresholdTableOfSeed003(t *testing.T) {
	d, err := ParseDistribution("1:9,3:5,5:4,never:2")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Thresholds(d, []int{1, 2, 3, 5, 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != len(seed003) {
		t.Fatalf("%d rows, want %d", len(r.Rows), len(seed003))
	}
	for i, want := range seed003 {
		got := r.Rows[i]
		cells := []struct {
			name      string
			got, want int64
		}{
			{"threshold", int64(got.Threshold), int64(want.Threshold)},
			{"processed", got.Processed, want.Processed},
			{"wasted attempts", got.WastedAttempts, want.WastedAttempts},
			{"wrongly isolated", got.WronglyIsolated, want.WronglyIsolated},
			{"permanently failing isolated", got.PermanentlyFailingIsolated, want.PermanentlyFailingIsolated},
		}
		for _, c := range cells {
			if c.got != c.want {
				t.Errorf("threshold %d, %s = %d, want %d", want.Threshold, c.name, c.got, c.want)
			}
		}
	}
	if r.Messages != 20 || r.PermanentlyFailing != 2 || r.MaxAttemptsNeeded != 5 {
		t.Errorf("messages %d, permanently failing %d, max needed %d; want 20, 2, 5", r.Messages, r.PermanentlyFailing, r.MaxAttemptsNeeded)
	}
	if r.RecommendedThreshold != 5 || !r.RecommendedListed || r.RecommendedRetryAttempts != 4 || r.MinimumSafeThreshold != 5 {
		t.Errorf("recommendation %d (listed %v, retry_attempts %d, minimum safe %d), want 5, true, 4, 5",
			r.RecommendedThreshold, r.RecommendedListed, r.RecommendedRetryAttempts, r.MinimumSafeThreshold)
	}
}

// The distribution of seed 003 rebuilt from its generator: message n needs
// 0 (never) for 7 and 13, 5 when n%5 == 0, 3 when n%3 == 0, else 1.
func TestAttemptsLogOfSeed003(t *testing.T) {
	var b strings.Builder
	b.WriteString("# attempts needed by the 20 messages of esik-secimi.mjs\n")
	for n := 1; n <= 20; n++ {
		switch {
		case n == 7 || n == 13:
			b.WriteString("never\n")
		case n%5 == 0:
			b.WriteString("5\n")
		case n%3 == 0:
			b.WriteString("3\n")
		default:
			b.WriteString("1\n")
		}
		if n == 10 {
			b.WriteString("\n")
		}
	}
	d, err := ReadAttemptsLog(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.String(); got != "1:9,3:5,5:4,never:2" {
		t.Errorf("distribution %q, want 1:9,3:5,5:4,never:2", got)
	}
	r, err := Thresholds(d, []int{1, 2, 3, 5, 8})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Rows, seed003) {
		t.Errorf("rows %+v\nwant %+v", r.Rows, seed003)
	}
}

func TestThresholdRecommendation(t *testing.T) {
	d, _ := ParseDistribution("1:10, 4:3, never:1, 4:1")
	if got := d.String(); got != "1:10,4:4,never:1" {
		t.Errorf("distribution %q: repeated values must add up", got)
	}
	// None of the listed thresholds is enough: recommend the minimum.
	r, _ := Thresholds(d, []int{1, 2, 3})
	if r.RecommendedThreshold != 4 || r.RecommendedListed {
		t.Errorf("recommended %d (listed %v), want 4 (not listed)", r.RecommendedThreshold, r.RecommendedListed)
	}
	// Listed out of order: the smallest safe one wins.
	r, _ = Thresholds(d, []int{8, 6, 2})
	if r.RecommendedThreshold != 6 || !r.RecommendedListed || r.MinimumSafeThreshold != 4 {
		t.Errorf("recommended %d (listed %v, minimum %d), want 6, true, 4", r.RecommendedThreshold, r.RecommendedListed, r.MinimumSafeThreshold)
	}
	// Only permanent failures: one attempt is enough.
	only, _ := ParseDistribution("never:3")
	r, _ = Thresholds(only, DefaultThresholds(only))
	if r.RecommendedThreshold != 1 || len(r.Rows) != 1 {
		t.Errorf("all permanent: %+v", r)
	}
	if got := DefaultThresholds(d); !reflect.DeepEqual(got, []int{1, 2, 3, 4, 5}) {
		t.Errorf("DefaultThresholds = %v, want 1..5", got)
	}
}
