package eventseq

import (
	"math"
	"strings"
	"testing"
)

func TestNext(t *testing.T) {
	for _, tt := range []struct {
		name                 string
		stored               int64
		storedTenant, tenant string
		version              int64
		next                 bool
		err                  string
	}{
		{"a first event", 0, "", "acme", 1, true, ""},
		{"a first event the read model meets late", 0, "", "acme", 7, true, ""},
		{"the next", 3, "acme", "acme", 4, true, ""},
		{"folded before", 3, "acme", "acme", 3, false, ""},
		{"long before", 3, "acme", "acme", 1, false, ""},
		{"a redelivery of another tenant's version", 3, "acme", "globex", 2, false, ""},
		{"version 0", 3, "acme", "acme", 0, false, "versions start at 1"},
		{"a negative version", 0, "", "acme", -1, false, "versions start at 1"},
		{"a gap", 3, "acme", "acme", 8, false, "does not follow version 3"},
		{"the largest version", 3, "acme", "acme", math.MaxInt64, false, "does not follow version 3"},
		{"another tenant's next", 3, "acme", "globex", 4, false, `of tenant "globex", the aggregate of tenant "acme"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next, err := Next(tt.stored, tt.storedTenant, tt.version, tt.tenant)
			if next != tt.next || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Next = %v, %v; want %v, %q", next, err, tt.next, tt.err)
			}
		})
	}
}
