package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fetch GETs a link and returns the status and body.
func fetch(t *testing.T, link string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// A task's declared output files are uploaded after it ends and listed in
// its result with sizes, sha256 and links that download them; a file
// whose name the object store cannot keep is skipped, not the others, and
// the task still completes; another tenant neither sees the result nor
// gets in with a link altered to name the task's files.
func TestArtifactsAreListedAndDownloadedByTheirOwnerOnly(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startAgent("agent-1", w.agentToken("agent-1"), 2)
	key, other := w.s.DemoAPIKey, w.tenantKey("other")
	script := `mkdir -p out/sub && printf 'weights' > out/model.pt && printf '{"loss":0.1}' > metrics.json &&
printf 'skip' > out/notes.txt && printf 'deep' > out/sub/deep.pt && printf 'dots' > out/model..pt &&
printf 'spaced' > 'out/my model.pt' && echo trained`
	id := w.submit(key, map[string]any{"name": "train", "type": "script", "command": script,
		"artifacts": []string{"out/*.pt", "metrics.json"}})
	if tk := w.waitStatus(key, id, 30*time.Second, "completed"); tk["created_by"] == "" || tk["created_by"] == nil {
		t.Fatalf("created_by = %v", tk["created_by"])
	}
	code, res, _ := w.call("GET", "/api/v1/tasks/"+id+"/result", key, nil)
	arts, _ := res["artifacts"].([]any)
	if code != 200 || len(arts) != 3 || res["stdout"] != "trained\n" || res["expires_in"] != float64(3600) {
		t.Fatalf("result = %d %v", code, res)
	}
	want := map[string]string{"metrics.json": `{"loss":0.1}`, "out/model.pt": "weights", "out/model..pt": "dots"}
	var link string
	for _, a := range arts {
		art := obj(a)
		body, ok := want[art["path"].(string)]
		sum := sha256.Sum256([]byte(body))
		// int64 sizes are JSON strings, as protojson writes them.
		if !ok || art["size"] != strconv.Itoa(len(body)) || art["sha256"] != hex.EncodeToString(sum[:]) {
			t.Fatalf("artifact %v", art)
		}
		status, got := fetch(t, art["url"].(string))
		if status != 200 || string(got) != body {
			t.Fatalf("download %s = %d %q", art["path"], status, got)
		}
		if art["path"] == "out/model.pt" {
			link = art["url"].(string)
		}
	}

	// Another tenant: its result read is 404/30004 ...
	if code, body, _ := w.call("GET", "/api/v1/tasks/"+id+"/result", other, nil); code != 404 || body["code"] != float64(30004) {
		t.Fatalf("another tenant's result = %d %v", code, body)
	}
	// ... and a link of its own, altered to name the first tenant's
	// artifact, is refused: a signature covers one object.
	own := w.submit(other, map[string]any{"name": "own", "type": "script", "command": "printf mine > mine.pt", "artifacts": []string{"*.pt"}})
	w.waitStatus(other, own, 30*time.Second, "completed")
	_, ores, _ := w.call("GET", "/api/v1/tasks/"+own+"/result", other, nil)
	oarts, _ := ores["artifacts"].([]any)
	if len(oarts) != 1 {
		t.Fatalf("other tenant's result = %v", ores)
	}
	ownLink, err := url.Parse(obj(oarts[0])["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(link)
	if status, _ := fetch(t, ownLink.String()); status != 200 {
		t.Fatalf("the other tenant's own link = %d", status)
	}
	ownLink.Path = target.Path
	status, body := fetch(t, ownLink.String())
	if status != http.StatusForbidden || strings.Contains(string(body), "weights") {
		t.Fatalf("altered link = %d %q", status, body)
	}
}
