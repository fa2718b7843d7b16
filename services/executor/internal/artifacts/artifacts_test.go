package artifacts

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFindMatchesRegularFilesInsideTheWorkdir(t *testing.T) {
	wd := t.TempDir()
	for _, p := range []string{"out/model.pt", "out/sub/deep.pt", "out/notes.txt", "metrics.json", "model.pt"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(wd, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wd, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(t.TempDir(), "secret.pt")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(wd, "out", "link.pt")); err != nil {
		t.Fatal(err)
	}
	files, truncated, err := Find(wd, []string{"out/*.pt", "metrics.json"})
	if err != nil || truncated || len(files) != 2 {
		t.Fatalf("files = %+v, %v, %v", files, truncated, err)
	}
	if files[0].Path != "metrics.json" || files[1].Path != "out/model.pt" || files[1].Size != int64(len("out/model.pt")) ||
		len(files[1].SHA256) != 64 {
		t.Fatalf("files = %+v", files)
	}
	if files, _, err := Find(wd, nil); err != nil || files != nil {
		t.Fatalf("no globs: %+v %v", files, err)
	}
}
