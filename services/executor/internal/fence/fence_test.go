package fence

import (
	"strings"
	"testing"
	"time"
)

func TestTimes(t *testing.T) {
	for _, tt := range []struct{ lostAfter, fence, grace time.Duration }{
		{15 * time.Second, 12 * time.Second, 2 * time.Second},
		{6 * time.Second, 4 * time.Second, time.Second},
		{3 * time.Second, 2 * time.Second, 500 * time.Millisecond},
	} {
		fence, grace := Times(tt.lostAfter)
		if fence != tt.fence || grace != tt.grace {
			t.Errorf("Times(%s) = %s, %s; want %s, %s", tt.lostAfter, fence, grace, tt.fence, tt.grace)
		}
		if fence+grace >= tt.lostAfter {
			t.Errorf("Times(%s): the kill at %s is not before the server's timeout", tt.lostAfter, fence+grace)
		}
	}
}

func TestMessage(t *testing.T) {
	// The chaos suite and operators recognise a fenced attempt by the
	// prefix.
	if m := Message(12 * time.Second); !strings.HasPrefix(m, "fenced: ") || !strings.Contains(m, "12s") {
		t.Fatalf("Message = %q", m)
	}
}
