package entryview

import (
	"strings"
	"testing"
)

func TestDiffJSONIsIndentedAndUnified(t *testing.T) {
	a := []byte(`{"id":"o-1","total":"12.50","items":[1,2,3],"currency":"EUR"}`)
	b := []byte(`{"id":"o-1","total":12.5,"items":[1,2,3],"currency":"EUR"}`)
	got := Diff(0, a, 1, b)
	for _, want := range []string{"--- version 0 (sha256 ", "+++ version 1 (sha256 ", "@@ -1,", `-  "total": "12.50",`, `+  "total": 12.5,`, `   "id": "o-1",`} {
		if !strings.Contains(got, want) {
			t.Errorf("diff lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, `-  "currency"`) || strings.Contains(got, `+  "id"`) {
		t.Errorf("unchanged lines marked changed:\n%s", got)
	}
}

func TestDiffHunksAndBinary(t *testing.T) {
	var a, b []string
	for i := range 40 {
		a = append(a, "line "+string(rune('A'+i%26)))
	}
	b = append(b, a...)
	b[2], b[30] = "changed near the top", "changed near the end"
	got := Diff(1, []byte(strings.Join(a, "\n")+"\n"), 2, []byte(strings.Join(b, "\n")+"\n"))
	if n := strings.Count(got, "@@ -"); n != 2 {
		t.Errorf("%d hunks, want 2:\n%s", n, got)
	}
	if !strings.Contains(got, "@@ -1,6 +1,6 @@") || !strings.Contains(got, "+changed near the end") {
		t.Errorf("hunks:\n%s", got)
	}
	bin := Diff(0, []byte{0xff, 0x00, 1}, 1, []byte{0xff, 0x00, 2, 3})
	if !strings.HasPrefix(bin, "binary body changed") || !strings.Contains(bin, "version 0: 3 bytes, sha256 ") || !strings.Contains(bin, "version 1: 4 bytes") {
		t.Errorf("binary summary:\n%s", bin)
	}
}
