package checkpoint

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestPackAndUnpackRoundTrip(t *testing.T) {
	src := t.TempDir()
	if !Empty(src) || !Empty(filepath.Join(src, "absent")) {
		t.Fatal("an empty or absent directory is not Empty")
	}
	if err := os.MkdirAll(filepath.Join(src, "opt"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"step": "41\n", "opt/state.bin": "\x00\x01\x02"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "c.tar.gz")
	size, digest, err := PackFile(src, out)
	if err != nil || size == 0 || len(digest) != 64 {
		t.Fatalf("pack = %d %q %v", size, digest, err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dst := t.TempDir()
	if err := Unpack(f, dst); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"step": "41\n", "opt/state.bin": "\x00\x01\x02"} {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v", name, got, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "link")); !os.IsNotExist(err) {
		t.Errorf("a symbolic link was packed: %v", err)
	}
}

func TestUnpackRefusesUnsafeEntries(t *testing.T) {
	for name, h := range map[string]tar.Header{
		"climbing": {Typeflag: tar.TypeReg, Name: "../evil", Size: 1},
		"absolute": {Typeflag: tar.TypeReg, Name: "/tmp/evil", Size: 1},
		"symlink":  {Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"},
		"unclean":  {Typeflag: tar.TypeReg, Name: "a/../../b", Size: 1},
	} {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write([]byte("x"))
		}
		tw.Close()
		gz.Close()
		dst := t.TempDir()
		if err := Unpack(&buf, dst); !errors.Is(err, ErrUnsafe) {
			t.Errorf("%s: err = %v", name, err)
		}
		if !Empty(dst) {
			t.Errorf("%s: something was written", name)
		}
	}
}
