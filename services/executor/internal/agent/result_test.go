package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/journal"
)

// objectStore accepts PUTs like a presigned object-store URL.
type objectStore struct {
	mu   sync.Mutex
	puts []put
}

type put struct {
	path          string
	body          []byte
	contentLength int64
	header        http.Header
}

func (o *objectStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "PUT only", http.StatusMethodNotAllowed)
		return
	}
	b, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	o.puts = append(o.puts, put{path: r.URL.Path, body: b, contentLength: r.ContentLength, header: r.Header.Clone()})
	o.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (o *objectStore) all() []put {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]put(nil), o.puts...)
}

func TestOutputSizes(t *testing.T) {
	store := &objectStore{}
	srv := httptest.NewServer(store)
	defer srv.Close()
	h := newHarness(t, func(c *Config) { c.OutputLimit = 100 << 10 })
	h.fake.SetUploadURL(srv.URL)

	tests := []struct {
		name            string
		stdoutBytes     int
		wantUpload      bool
		wantKept        int
		wantTruncated   int64
		wantInlineBytes int
	}{
		{name: "small inline", stdoutBytes: 1000, wantInlineBytes: 1000},
		{name: "just under 64 KiB inline", stdoutBytes: 64<<10 - 1, wantInlineBytes: 64<<10 - 1},
		{name: "64 KiB uploaded", stdoutBytes: 64 << 10, wantUpload: true, wantKept: 64 << 10, wantInlineBytes: 32 << 10},
		{name: "over the cap", stdoutBytes: 300 << 10, wantUpload: true, wantKept: 100 << 10, wantTruncated: 200 << 10, wantInlineBytes: 32 << 10},
	}
	ids := make([]string, len(tests))
	for i, tc := range tests {
		// The last line differs from the rest so the inline tail can be told
		// from the head.
		ids[i] = h.fake.Add(script(`head -c $(($1 - 4)) /dev/zero | tr '\0' a; printf 'END\n'; echo small >&2`,
			strconv.Itoa(tc.stdoutBytes)))[0]
	}
	h.start()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := h.fake.WaitComplete(t, ids[i], 20*time.Second)
			if c.GetExitCode() != 0 || c.GetStderr() != "small\n" {
				t.Fatalf("completion exit %d stderr %q error %q", c.GetExitCode(), c.GetStderr(), c.GetError())
			}
			if len(c.GetStdout()) != tc.wantInlineBytes || !strings.HasSuffix(c.GetStdout(), "aEND\n") {
				t.Errorf("inline stdout is %d bytes ending %q, want %d ending aEND", len(c.GetStdout()),
					c.GetStdout()[max(0, len(c.GetStdout())-8):], tc.wantInlineBytes)
			}
			ro := c.GetResultObject()
			if !tc.wantUpload {
				if ro != nil {
					t.Errorf("small result uploaded: %v", ro)
				}
				return
			}
			if ro == nil {
				t.Fatal("large result without result_object")
			}
			var up *taskv1.CreateResultUploadRequest
			for _, call := range h.fake.Calls("CreateResultUpload") {
				if r := call.Req.(*taskv1.CreateResultUploadRequest); r.GetTaskId() == ids[i] {
					up = r
				}
			}
			if up == nil || up.GetContentType() != "application/json" || up.GetSizeBytes() != ro.GetSizeBytes() || up.GetSha256() != ro.GetSha256() {
				t.Fatalf("upload request %v vs result object %v", up, ro)
			}
			var got *put
			for _, p := range store.all() {
				if strings.HasSuffix(p.path, ro.GetKey()) {
					got = &p
				}
			}
			if got == nil {
				t.Fatalf("no PUT for %s", ro.GetKey())
			}
			sum := sha256.Sum256(got.body)
			if int64(len(got.body)) != ro.GetSizeBytes() || got.contentLength != ro.GetSizeBytes() ||
				hex.EncodeToString(sum[:]) != ro.GetSha256() || got.header.Get("X-Upload-Sha256") != ro.GetSha256() {
				t.Errorf("PUT of %d bytes (content-length %d) does not match %v", len(got.body), got.contentLength, ro)
			}
			var body struct {
				Stdout               string `json:"stdout"`
				Stderr               string `json:"stderr"`
				StdoutTruncatedBytes int64  `json:"stdout_truncated_bytes"`
				StderrTruncatedBytes int64  `json:"stderr_truncated_bytes"`
			}
			if err := json.Unmarshal(got.body, &body); err != nil {
				t.Fatalf("uploaded body: %v", err)
			}
			if len(body.Stdout) != tc.wantKept || body.StdoutTruncatedBytes != tc.wantTruncated ||
				body.Stderr != "small\n" || body.StderrTruncatedBytes != 0 {
				t.Errorf("uploaded stdout %d bytes, truncated %d, stderr %q; want %d, %d", len(body.Stdout),
					body.StdoutTruncatedBytes, body.Stderr, tc.wantKept, tc.wantTruncated)
			}
			row := h.waitRow(ids[i], 5*time.Second, "synced", func(r journal.Task) bool { return r.Synced })
			if row.ResultKey != ro.GetKey() || row.StdoutTruncated != tc.wantTruncated {
				t.Errorf("journal result %q truncated %d", row.ResultKey, row.StdoutTruncated)
			}
		})
	}
}

func TestProgressReports(t *testing.T) {
	h := newHarness(t, nil).start()
	id := h.fake.Add(script(`echo '30 from file' > "$TASKMESH_PROGRESS_FILE"; sleep 1.5
echo '::progress::70 from stdout'; sleep 1.5
echo 90 >> "$TASKMESH_PROGRESS_FILE"; sleep 1.5`))[0]
	h.fake.WaitComplete(t, id, 20*time.Second)
	type report struct {
		v   int32
		msg string
		at  time.Time
	}
	var got []report
	for _, c := range h.fake.Calls("ReportTaskProgress") {
		r := c.Req.(*taskv1.ReportTaskProgressRequest)
		got = append(got, report{r.GetProgress(), r.GetMessage(), c.At})
	}
	want := []report{{v: 30, msg: "from file"}, {v: 70, msg: "from stdout"}, {v: 90}}
	if len(got) != len(want) {
		t.Fatalf("progress reports %v, want %v", got, want)
	}
	for i := range want {
		if got[i].v != want[i].v || got[i].msg != want[i].msg {
			t.Errorf("report %d = %d %q, want %d %q", i, got[i].v, got[i].msg, want[i].v, want[i].msg)
		}
		if i > 0 && got[i].at.Sub(got[i-1].at) < 800*time.Millisecond {
			t.Errorf("reports %d and %d only %s apart: not rate-limited", i-1, i, got[i].at.Sub(got[i-1].at))
		}
	}
	if row := h.row(id); row.Progress != 100 {
		t.Errorf("journal progress after completion = %d", row.Progress)
	}
}
