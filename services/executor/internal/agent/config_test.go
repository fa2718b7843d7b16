package agent

import (
	"strings"
	"testing"
	"time"
)

// The orphan grace follows the server's dead-agent timeout: two thirds of
// it unless set, and never so long that a task outlives the moment the
// server may lease it elsewhere.
func TestOrphanGraceStaysBelowTheServersDeadAgentTimeout(t *testing.T) {
	tests := []struct {
		name                string
		lostAfter, orphan   time.Duration
		wantOrphan, wantErr string
	}{
		{"the defaults", 0, 0, "10s", ""},
		{"a server that waits a minute", time.Minute, 0, "40s", ""},
		{"set, a second below the timeout", time.Minute, 59 * time.Second, "59s", ""},
		{"set, less than a second below", time.Minute, 59500 * time.Millisecond, "", "orphan grace must stay below the server's dead-agent timeout of 1m0s (59s at most)"},
		{"set too long for the default timeout", 0, 20 * time.Second, "", "(14s at most)"},
		{"a short timeout keeps a third of it", 1500 * time.Millisecond, 0, "1s", ""},
		{"a short timeout, set up to two thirds", 1500 * time.Millisecond, 1100 * time.Millisecond, "", "(1s at most)"},
	}
	for _, tt := range tests {
		c, err := Config{Settings: Settings{AgentID: "a", DataDir: t.TempDir(), AgentLostAfter: tt.lostAfter, OrphanGrace: tt.orphan}}.withDefaults()
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case c.OrphanGrace.String() != tt.wantOrphan:
			t.Errorf("%s: orphan grace %s, want %s", tt.name, c.OrphanGrace, tt.wantOrphan)
		}
	}
}
