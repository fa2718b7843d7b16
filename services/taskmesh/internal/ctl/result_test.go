package ctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestDownload(t *testing.T) {
	body := []byte(`{"stdout":"` + strings.Repeat("x", 100<<10) + `"}`)
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("X-Signature") != "good" {
			http.Error(w, "bad signature", http.StatusForbidden)
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	a := testApp()
	ctx := context.Background()

	var out bytes.Buffer
	if err := a.download(ctx, srv.URL+"/objects/r.json?X-Signature=good", digest, int64(len(body)), &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), body) {
		t.Error("downloaded body differs")
	}

	tests := []struct {
		name, url, sha string
		size           int64
		want           string
	}{
		{"checksum mismatch", srv.URL + "/r?X-Signature=good", strings.Repeat("0", 64), 0, "the download is corrupt"},
		{"size mismatch", srv.URL + "/r?X-Signature=good", "", 10, "want 10"},
		{"refused", srv.URL + "/r?X-Signature=bad", "", 0, "403 Forbidden: bad signature"},
		{"unreachable", "http://127.0.0.1:1/r?X-Signature=secret-sig", "", 0, "connection refused"},
		{"not http", "file:///etc/passwd", "", 0, "malformed link"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := a.download(ctx, tt.url, tt.sha, tt.size, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "X-Signature") || strings.Contains(err.Error(), "secret-sig") {
				t.Errorf("the error shows the signed link: %v", err)
			}
		})
	}
}

// A result file appears only complete and verified.
func TestToOutputFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "result.json")
	a := testApp()
	cmd := &cobra.Command{}
	if err := a.toOutput(cmd, path, func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A failing write leaves the earlier file alone and no debris.
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := a.toOutput(cmd, path, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return os.ErrDeadlineExceeded
	})
	if err == nil {
		t.Fatal("no error")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("file = %q, want the old content", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only result.json", len(entries))
	}
}
