package outbox

import "testing"

func TestPositionOrderAndParse(t *testing.T) {
	tests := []struct {
		a, b Position
		less bool
	}{
		{Position{1, 5}, Position{2, 1}, true},
		{Position{2, 1}, Position{1, 5}, false},
		{Position{3, 1}, Position{3, 2}, true},
		{Position{3, 2}, Position{3, 2}, false},
	}
	for _, tt := range tests {
		if got := tt.a.Less(tt.b); got != tt.less {
			t.Errorf("%v < %v = %v, want %v", tt.a, tt.b, got, tt.less)
		}
	}
	p := Position{TxID: 18446744073709551615, EventID: 42}
	got, err := ParsePosition(p.String())
	if err != nil || got != p {
		t.Fatalf("round trip %v -> %q -> %v, %v", p, p.String(), got, err)
	}
	for _, bad := range []string{"", "1", "x:1", "1:y", "1:2:3"} {
		if _, err := ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) accepted", bad)
		}
	}
}
