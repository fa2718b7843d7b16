package requestid

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestValid(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{id: "req-uuid-1", want: true},
		{id: "0f8c2b4e-1d2a-4c55-9b0e-7a1c3f9d8e21", want: true},
		{id: "trace:abc.def_1", want: true},
		{id: strings.Repeat("a", 128), want: true},
		{id: ""},
		{id: strings.Repeat("a", 129)},
		{id: "has space"},
		{id: "line\nbreak"},
		{id: `quote"`},
		{id: "ünïcode"},
	}
	for _, tt := range tests {
		if got := Valid(tt.id); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestEnsure(t *testing.T) {
	if got := Ensure("abc"); got != "abc" {
		t.Errorf("Ensure(abc) = %q", got)
	}
	got := Ensure("bad id")
	if !Valid(got) || !uuidV4.MatchString(got) || got == Ensure("bad id") {
		t.Errorf("Ensure(bad id) = %q, want a fresh UUID", got)
	}
	if FromContext(NewContext(context.Background(), "x")) != "x" || FromContext(context.Background()) != "" {
		t.Error("context round trip failed")
	}
}
