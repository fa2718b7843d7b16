// Package artifacts finds a task's output files (docs/api/tasks.md#artifacts):
// the regular files under its working directory that its artifacts globs
// match. Globs are path.Match patterns on slash-separated paths relative to
// the working directory; symbolic links are never followed, so an artifact
// is always a file the task wrote inside its working directory.
package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// MaxFiles bounds the artifacts of one attempt (the scheduler accepts no
// more with CompleteTask).
const MaxFiles = 100

// File is one matched file.
type File struct {
	Path   string // relative, slash-separated
	Abs    string
	Size   int64
	SHA256 string
}

// Find returns the regular files under workdir that a glob matches, sorted
// by path, at most MaxFiles (truncated reports more were matched). A glob
// matches whole relative paths ("out/*.pt" does not match
// "out/sub/a.pt").
func Find(workdir string, globs []string) (files []File, truncated bool, err error) {
	if len(globs) == 0 {
		return nil, false, nil
	}
	// Only directories a glob could reach are walked: the depth of the
	// deepest glob bounds the walk.
	depth := 0
	for _, g := range globs {
		depth = max(depth, strings.Count(g, "/")+1)
	}
	err = filepath.WalkDir(workdir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == workdir {
				return err
			}
			return nil // an unreadable corner is not an artifact
		}
		rel, _ := filepath.Rel(workdir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && strings.Count(rel, "/")+1 >= depth {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !matches(globs, rel) {
			return nil
		}
		if len(files) == MaxFiles {
			truncated = true
			return filepath.SkipAll
		}
		files = append(files, File{Path: rel, Abs: p})
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	for i := range files {
		if files[i].Size, files[i].SHA256, err = digest(files[i].Abs); err != nil {
			return nil, false, err
		}
	}
	return files, truncated, nil
}

func matches(globs []string, rel string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, rel); ok {
			return true
		}
	}
	return false
}

func digest(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
