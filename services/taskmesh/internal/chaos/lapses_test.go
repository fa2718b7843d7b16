package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLapsesAreReadFromTheAgentsLogAndPlacedAgainstTheFaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent-1.log")
	log := `time=2026-12-05T10:00:01.000Z level=INFO msg="claimed" service=executor tasks=1
time=2026-12-05T10:00:10.000Z level=WARN msg="fence passed: the server answered none of this agent's calls for longer than the fence" service=executor silent_for=3.5s fence=2.667s
time=2026-12-05T10:01:00.250Z level=WARN msg="fence passed: the server answered none of this agent's calls for longer than the fence" service=executor silent_for=2.75s fence=2.667s
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	lapses, err := readLapses("agent-1", path)
	if err != nil || len(lapses) != 2 {
		t.Fatalf("lapses = %+v, %v", lapses, err)
	}
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339Nano, s); return v }
	if !lapses[0].start.Equal(at("2026-12-05T10:00:06.5Z")) || !lapses[0].end.Equal(at("2026-12-05T10:00:10Z")) {
		t.Errorf("first lapse = %+v", lapses[0])
	}
	// The first lapse falls in a Postgres restart (healed 10:00:03, slack
	// 5 s); the second has no fault near it.
	windows := []window{{kind: faultPostgres, target: "postgres", start: at("2026-12-05T10:00:00Z"), end: at("2026-12-05T10:00:03Z")}}
	got := summarizeLapses(lapses, windows, 5*time.Second)
	if want := "2, 1 with no fault in progress: agent-1 at 10:01:00.250 silent 2.75s"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	if got := summarizeLapses(nil, windows, time.Second); got != "none" {
		t.Errorf("no lapses: %q", got)
	}

	// A line that carries the message but not the fields is an error, not
	// a lapse silently left out.
	if err := os.WriteFile(path, []byte(`time=x level=WARN `+lapseMessage+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readLapses("agent-1", path); err == nil || !strings.Contains(err.Error(), "without time or silent_for") {
		t.Errorf("a malformed lapse line: %v", err)
	}
}
