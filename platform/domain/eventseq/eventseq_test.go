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
		creates              bool
		next                 bool
		err                  string
	}{
		{"a first event", 0, "", "acme", 1, false, true, ""},
		{"a first event the read model meets late", 0, "", "acme", 7, false, true, ""},
		{"the next", 3, "acme", "acme", 4, false, true, ""},
		{"folded before", 3, "acme", "acme", 3, false, false, ""},
		{"long before", 3, "acme", "acme", 1, false, false, ""},
		{"a redelivery of another tenant's version", 3, "acme", "globex", 2, false, false, ""},
		{"version 0", 3, "acme", "acme", 0, false, false, "versions start at 1"},
		{"a negative version", 0, "", "acme", -1, false, false, "versions start at 1"},
		{"a gap", 3, "acme", "acme", 8, false, false, "does not follow version 3"},
		{"the largest version", 3, "acme", "acme", math.MaxInt64, false, false, "does not follow version 3"},
		{"another tenant's next", 3, "acme", "globex", 4, false, false, `of tenant "globex", the aggregate of tenant "acme"`},
		{"a creation first", 0, "", "acme", 1, true, true, ""},
		{"a creation later", 3, "acme", "acme", 4, true, false, "only its first event"},
		{"a creation met late", 0, "", "acme", 7, true, false, "only its first event"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next, err := Next(tt.stored, tt.storedTenant, Event{Version: tt.version, Tenant: tt.tenant, Creates: tt.creates})
			if next != tt.next || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Next = %v, %v; want %v, %q", next, err, tt.next, tt.err)
			}
		})
	}
}
