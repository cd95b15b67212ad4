package evidence

import "testing"

func TestSchemaVersion(t *testing.T) {
	tests := []struct {
		v    any
		want int
		ok   bool
	}{
		{int32(4), 4, true}, {int64(4), 4, true}, {int8(1), 1, true}, {uint16(9), 9, true}, {"12", 12, true},
		{[]byte("3"), 3, true}, {"007", 7, true}, {int64(MaxSchemaVersion), MaxSchemaVersion, true},
		{int32(0), 0, false}, {int32(-1), 0, false}, {"+3", 0, false}, {" 3", 0, false}, {"v3", 0, false},
		{"", 0, false}, {3.0, 0, false}, {true, 0, false}, {nil, 0, false}, {int64(MaxSchemaVersion) + 1, 0, false},
		{"99999999999", 0, false},
	}
	for _, tt := range tests {
		got, ok := SchemaVersion(map[string]any{HeaderSchemaVersion: tt.v})
		if got != tt.want || ok != tt.ok {
			t.Errorf("SchemaVersion(%s) = %d, %v; want %d, %v", FormatRaw(tt.v), got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := SchemaVersion(map[string]any{}); ok {
		t.Error("absent header read as a version")
	}
	h := map[string]any{}
	SetSchemaVersion(h, 5)
	if h[HeaderSchemaVersion] != int32(5) {
		t.Errorf("SetSchemaVersion wrote %#v, want int32(5)", h[HeaderSchemaVersion])
	}
	SetSchemaVersion(h, 0)
	if _, ok := h[HeaderSchemaVersion]; ok {
		t.Error("SetSchemaVersion(0) kept the header")
	}
}
