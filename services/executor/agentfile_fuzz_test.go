package executor_test

import (
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/services/executor"
)

// FuzzAgentFileQuantities feeds arbitrary ages and sizes of the cleanup
// block: nothing panics and accepted values are positive.
func FuzzAgentFileQuantities(f *testing.F) {
	for _, s := range []string{"7d", "36h", "10GB", "1.5GiB", "0", "-1d", "1e400d", "d", "GB", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		given := strings.TrimSpace(s) != "" // blank is "not given": the default
		if d, err := executor.ParseAge(s); err == nil && given && d <= 0 {
			t.Fatalf("age %q parsed as %s", s, d)
		}
		if n, err := executor.ParseSize(s); err == nil && given && n <= 0 {
			t.Fatalf("size %q parsed as %d", s, n)
		}
	})
}
