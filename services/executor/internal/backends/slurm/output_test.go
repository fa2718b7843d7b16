package slurm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCollectOutputNUL: a batch job's output with NUL bytes travels
// inline with each NUL as U+FFFD (the API refuses a NUL in any string),
// while the uploaded result object keeps them (JSON carries \u0000).
func TestCollectOutputNUL(t *testing.T) {
	dir := t.TempDir()
	so, se := filepath.Join(dir, "out"), filepath.Join(dir, "err")
	if err := os.WriteFile(so, []byte("a\x00b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(se, []byte("\xff\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := collectOutput(so, se, 1<<20)
	if out.stdout != "a\uFFFDb\n" || out.stderr != "\uFFFD\uFFFD" || out.object != nil {
		t.Errorf("small output = %q, %q, object %s", out.stdout, out.stderr, out.object)
	}

	big := strings.Repeat("\x00", inlineLimit+1)
	if err := os.WriteFile(so, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	out = collectOutput(so, se, 1<<20)
	if strings.IndexByte(out.stdout, 0) >= 0 || strings.IndexByte(out.stderr, 0) >= 0 {
		t.Errorf("the inline tails hold a NUL")
	}
	var obj struct{ Stdout string }
	if err := json.Unmarshal(out.object, &obj); err != nil || obj.Stdout != big {
		t.Errorf("result object stdout: %d bytes, err %v; want the %d NULs", len(obj.Stdout), err, len(big))
	}
}
