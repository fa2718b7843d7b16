package archtest

import (
	"fmt"
	"os"
	"path/filepath"
)

// RepoRoot is the directory holding go.work, searched from dir upwards.
func RepoRoot(dir string) (string, error) {
	start, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for dir = start; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.work in %s or above", start)
		}
		dir = parent
	}
}
