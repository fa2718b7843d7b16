package flagenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
)

func TestApplyPrecedence(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	a := fs.String("listen-addr", "default", "")
	b := fs.String("database-url", "default", "")
	n := fs.Int("slots", 1, "")
	if err := fs.Parse([]string{"--listen-addr", "flag"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TASKMESH_LISTEN_ADDR", "env")
	t.Setenv("TASKMESH_DATABASE_URL", "env")
	t.Setenv("TASKMESH_SLOTS", "7")
	if err := Apply(fs); err != nil {
		t.Fatal(err)
	}
	if *a != "flag" || *b != "env" || *n != 7 {
		t.Fatalf("got %q %q %d", *a, *b, *n)
	}
	t.Setenv("TASKMESH_SLOTS", "many")
	fs2 := pflag.NewFlagSet("y", pflag.ContinueOnError)
	fs2.Int("slots", 1, "")
	if err := Apply(fs2); err == nil {
		t.Fatal("bad number accepted")
	}
}

func TestSecret(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(p, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := Secret("x", p); err != nil || v != "tok" {
		t.Fatalf("%q %v", v, err)
	}
	if v, _ := Secret("x", ""); v != "x" {
		t.Fatalf("%q", v)
	}
	if _, err := Secret("", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
}
