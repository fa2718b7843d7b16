package objectstore

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func newCopyTestFS(t *testing.T) (*FS, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	f, err := NewFS(FSConfig{Root: root, BaseURL: "http://127.0.0.1:1/objects", Secret: bytes.Repeat([]byte("k"), MinSecretLen)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.root.Close() })
	return f, root
}

func sameFile(t *testing.T, root, a, b string) bool {
	t.Helper()
	sa, err := os.Stat(filepath.Join(root, objectName(a)))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Stat(filepath.Join(root, objectName(b)))
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(sa, sb)
}

func emptyTmp(t *testing.T, root string) {
	t.Helper()
	if entries, err := os.ReadDir(filepath.Join(root, tmpDir)); err != nil || len(entries) != 0 {
		t.Fatalf("tmp/ holds %d entries (%v)", len(entries), err)
	}
}

// A copy is a second link to the source's file: no bytes written.
func TestFSCopyLinksTheFile(t *testing.T) {
	f, root := newCopyTestFS(t)
	ctx := context.Background()
	if _, err := f.Put(ctx, "uploads/m", bytes.NewReader([]byte("model bytes")), 11, "application/octet-stream"); err != nil {
		t.Fatal(err)
	}
	src, _ := f.Stat(ctx, "uploads/m")
	info, err := f.Copy(ctx, "uploads/m", "jobs/j/input/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if !sameFile(t, root, "uploads/m", "jobs/j/input/model.onnx") {
		t.Fatal("the copy is a file of its own; want a link to the source's")
	}
	if !info.ModTime.Equal(src.ModTime) || info.SHA256 != src.SHA256 {
		t.Fatalf("copy info %+v, want the source's %+v under the new key", info, src)
	}
	emptyTmp(t, root)
}

// Where no link can be made (EMLINK: the file system's limit of links to
// one file; EXDEV), the bytes are copied instead.
func TestFSCopyWithoutALinkCopiesTheBytes(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMLINK, syscall.EXDEV} {
		f, root := newCopyTestFS(t)
		f.link = func(oldname, newname string) error {
			return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: errno}
		}
		ctx := context.Background()
		data := bytes.Repeat([]byte("q"), 3000)
		if _, err := f.Put(ctx, "uploads/q", bytes.NewReader(data), int64(len(data)), "application/zip"); err != nil {
			t.Fatal(err)
		}
		info, err := f.Copy(ctx, "uploads/q", "jobs/j/input/quant.zip")
		if err != nil {
			t.Fatalf("%v: %v", errno, err)
		}
		if sameFile(t, root, "uploads/q", "jobs/j/input/quant.zip") {
			t.Fatalf("%v: the copy is a link", errno)
		}
		rc, _, err := f.Open(ctx, "jobs/j/input/quant.zip")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, data) || info.Size != int64(len(data)) || info.ContentType != "application/zip" {
			t.Fatalf("%v: copy of %d bytes (%+v), want the source's %d", errno, len(got), info, len(data))
		}
		emptyTmp(t, root)
	}
}

// A temporary link keeps its source's modification time, which may be
// long past; a second store opening the same root (a restart) must not
// take it for debris while the copy is under way.
func TestFSFreshCopyLinkIsNotDebris(t *testing.T) {
	f, root := newCopyTestFS(t)
	ctx := context.Background()
	if _, err := f.Put(ctx, "uploads/m", bytes.NewReader([]byte("m")), 1, ""); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(filepath.Join(root, objectName("uploads/m")), old, old); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, tmpDir, "copy-inflight")
	if err := os.Link(filepath.Join(root, objectName("uploads/m")), link); err != nil {
		t.Fatal(err)
	}
	if _, err := NewFS(FSConfig{Root: root, BaseURL: "http://127.0.0.1:1/objects", Secret: bytes.Repeat([]byte("k"), MinSecretLen)}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(link); err != nil {
		t.Fatalf("a fresh temporary link was removed: %v", err)
	}
}
