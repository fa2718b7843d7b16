package agent

import (
	"testing"
	"time"
)

// By default one shim host serves all of an agent's tasks; ShimPerTask
// gives each task a shim process of its own. Either way the tasks run to
// their outcome alike.
func TestShimsServeTasksInBothModes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perTask   bool
		sameShims bool
	}{
		{name: "host", perTask: false, sameShims: true},
		{name: "per task", perTask: true, sameShims: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.ShimPerTask = tc.perTask }).start()
			// Both run at once: a shim of its own serves one task only.
			ids := h.fake.Add(shell("sh", "-c", "sleep 0.3; echo one"), shell("sh", "-c", "sleep 0.3; echo two; exit 3"))
			first := h.fake.WaitComplete(t, ids[0], 15*time.Second)
			second := h.fake.WaitComplete(t, ids[1], 15*time.Second)
			if first.GetExitCode() != 0 || first.GetStdout() != "one\n" || second.GetExitCode() != 3 || second.GetStdout() != "two\n" {
				t.Fatalf("outcomes: exit %d %q and exit %d %q, want 0 \"one\\n\" and 3 \"two\\n\"",
					first.GetExitCode(), first.GetStdout(), second.GetExitCode(), second.GetStdout())
			}
			a, b := h.row(ids[0]), h.row(ids[1])
			if a.ShimPID == 0 || b.ShimPID == 0 || a.PID == b.PID {
				t.Fatalf("journal: shims %d and %d, pids %d and %d", a.ShimPID, b.ShimPID, a.PID, b.PID)
			}
			if same := a.ShimPID == b.ShimPID; same != tc.sameShims {
				t.Fatalf("shims %d and %d: same %v, want %v", a.ShimPID, b.ShimPID, same, tc.sameShims)
			}
		})
	}
}
