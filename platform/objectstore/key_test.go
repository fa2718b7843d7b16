package objectstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/objectstore"
)

func TestValidateKey(t *testing.T) {
	valid := []string{
		"a",
		"task-results/0190f1b2-7c1e-7d44-9a51-3c2f1d9e8b77/output.tar.zst",
		"A.b_c-d/E",
		".hidden",
		"a/.b",
		"v1.2/x",
		// ".." inside a name is no segment: "/" is the only separator.
		"a..b",
		"out/model..pt",
		"a/...",
		strings.Repeat("a", objectstore.MaxKeyLen),
	}
	for _, k := range valid {
		if err := objectstore.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	invalid := []string{
		"",
		"/a",
		"a/",
		"a//b",
		"..",
		"../a",
		"a/../b",
		"a/..",
		".",
		"./a",
		"a/./b",
		"a\\b",
		"a b",
		"a%2Fb",
		"a\x00b",
		"a\nb",
		"é",
		"a?b",
		"a#b",
		"a:b",
		strings.Repeat("a", objectstore.MaxKeyLen+1),
	}
	for _, k := range invalid {
		err := objectstore.ValidateKey(k)
		if !errors.Is(err, objectstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
			continue
		}
		if err.Error() == objectstore.ErrInvalidKey.Error() {
			t.Errorf("ValidateKey(%q) error %q does not say why", k, err)
		}
	}
}
