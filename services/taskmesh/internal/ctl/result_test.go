package ctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
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

// resultServer answers GetTaskResult with an object-store result whose
// link points at url.
type resultServer struct {
	taskv1.UnimplementedTaskServiceServer
	url, sha string
	size     int64
}

func (s *resultServer) GetTaskResult(_ context.Context, r *taskv1.GetTaskResultRequest) (*taskv1.GetTaskResultResponse, error) {
	return &taskv1.GetTaskResultResponse{Result: &taskv1.TaskResult{TaskId: r.GetId(), Status: "completed", StorageType: storageS3,
		PresignedUrl: s.url, Sha256: s.sha, SizeBytes: s.size}}, nil
}

// A result in the object store prints as an inline one does: its stdout
// on standard output (or in FILE), its stderr on standard error. --raw,
// and an object that is not the stored output (a video), are written as
// they are.
func TestResultFromObjectStorePrintsOutput(t *testing.T) {
	stdout := strings.Repeat("line of output\n", 5000)
	envelope, _ := json.Marshal(map[string]any{"stdout": stdout, "stderr": "warn\n", "stdout_truncated_bytes": 7, "stderr_truncated_bytes": 0})
	video := append([]byte{0, 0, 0, 0x18}, []byte("ftypmp42 rest of the video")...)
	for _, tt := range []struct {
		name                 string
		body                 []byte
		args                 []string
		wantOut, wantErrPart string
	}{
		{"stored output", envelope, nil, stdout, "warn\nnote: 7 bytes of stdout were dropped by the agent's output limit\n"},
		{"raw", envelope, []string{"--raw"}, string(envelope), ""},
		{"video", video, nil, string(video), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(tt.body) }))
			defer store.Close()
			sum := sha256.Sum256(tt.body)
			srv := &resultServer{url: store.URL + "/results/t1.json?sig=x", sha: hex.EncodeToString(sum[:]), size: int64(len(tt.body))}
			addr := serve(t, func(s *grpc.Server) { taskv1.RegisterTaskServiceServer(s, srv) })

			r := testApp(EnvAPIKey, "k").run(t, "", append([]string{"tasks", "result", "t1", "--server", addr}, tt.args...)...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if r.stdout != tt.wantOut {
				t.Errorf("stdout: %d bytes starting %.40q, want %d bytes starting %.40q", len(r.stdout), r.stdout, len(tt.wantOut), tt.wantOut)
			}
			if r.stderr != tt.wantErrPart {
				t.Errorf("stderr %q, want %q", r.stderr, tt.wantErrPart)
			}

			path := filepath.Join(t.TempDir(), "out")
			r = testApp(EnvAPIKey, "k").run(t, "", append([]string{"tasks", "result", "t1", "--server", addr, "-o", path}, tt.args...)...)
			if got, err := os.ReadFile(path); r.code != 0 || err != nil || string(got) != tt.wantOut {
				t.Errorf("-o FILE: exit %d (%s), file %d bytes (%v), want %d bytes", r.code, r.stderr, len(got), err, len(tt.wantOut))
			}
		})
	}
}
