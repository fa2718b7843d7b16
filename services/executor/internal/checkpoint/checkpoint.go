// Package checkpoint packs and restores the checkpoint directory of a
// cooperative task (docs/api/tasks.md#checkpoints). The agent gives every
// run of such a task an empty TASKMESH_CHECKPOINT_DIR, restores the task's
// last checkpoint into it before the process starts, and after the process
// stopped for a preemption or suspension packs what it wrote into a gzipped
// tar that goes to the object store.
//
// The archive holds regular files and directories only, with relative
// paths; Unpack refuses anything else (links, devices, absolute paths,
// "..") so a checkpoint can never write outside its directory, and bounds
// the bytes it writes.
package checkpoint

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// DirName is the checkpoint directory's name inside an attempt's run
// directory.
const DirName = "checkpoint"

// EnvVar names the directory for the task's process.
const EnvVar = "TASKMESH_CHECKPOINT_DIR"

// MaxBytes bounds what one checkpoint may unpack to (and pack from).
const MaxBytes = 10 << 30

// ErrUnsafe: the archive names something Unpack will not create.
var ErrUnsafe = errors.New("checkpoint: unsafe archive entry")

// Empty reports whether dir has nothing to save (absent or no entries).
func Empty(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err != nil || len(entries) == 0
}

// PackFile writes dir as a gzipped tar to out and returns its size and hex
// SHA-256. Symbolic links and other non-regular files are skipped: only
// what the task wrote as files is its state.
func PackFile(dir, out string) (size int64, digest string, err error) {
	f, err := os.OpenFile(out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	counted := &countWriter{w: io.MultiWriter(f, h)}
	if err := pack(dir, counted); err != nil {
		return 0, "", err
	}
	if err := f.Sync(); err != nil {
		return 0, "", err
	}
	return counted.n, hex.EncodeToString(h.Sum(nil)), nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func pack(dir string, w io.Writer) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o700, ModTime: info.ModTime()})
		case !info.Mode().IsRegular():
			return nil
		}
		if total += info.Size(); total > MaxBytes {
			return fmt.Errorf("checkpoint: more than %d bytes", int64(MaxBytes))
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: info.Size(), ModTime: info.ModTime()}); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// Exactly the size the header announced, even if the file grows.
		_, err = io.CopyN(tw, f, info.Size())
		return err
	})
	if err != nil {
		return fmt.Errorf("pack checkpoint: %w", err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// Unpack extracts a gzipped tar made by PackFile into dir, which must
// exist.
func Unpack(r io.Reader, dir string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("unpack checkpoint: %w", err)
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unpack checkpoint: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		clean := path.Clean(name)
		if name == "" || path.IsAbs(name) || clean != name || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("%w: %q", ErrUnsafe, h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(clean))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if total += h.Size; total > MaxBytes {
				return fmt.Errorf("%w: more than %d bytes", ErrUnsafe, int64(MaxBytes))
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return err
			}
			if err := writeFile(target, tr, h.Size); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: %q is not a file or directory", ErrUnsafe, h.Name)
		}
	}
}

func writeFile(target string, r io.Reader, size int64) error {
	// O_EXCL: an entry never replaces what an earlier one (or a link)
	// made.
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("unpack checkpoint: %w", err)
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return fmt.Errorf("unpack checkpoint: %w", err)
	}
	return f.Close()
}
