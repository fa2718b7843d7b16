package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// awaitPromise makes chromedp.Evaluate wait for the promise the
// expression returns and give its value.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

// TestAWebPageCannotReachTheAgentsLocalAPI opens a page of another origin
// on the agent's machine in headless Chromium and has it do what a
// hostile page would (docs/api/agent-local.md): POST a task to the
// credential-free local API as text/plain, which needs no preflight. The
// task never runs and nothing is queued. (A read across origins the
// browser itself withholds; a read after DNS rebinding is refused by the
// Host check, which the local API's own tests cover.)
func TestAWebPageCannotReachTheAgentsLocalAPI(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	w := newWorld(t)
	local := freeLoopbackAddr(t)
	w.startAgentSpec(agentSpec{AgentID: "agent-csrf", Token: w.agentToken("agent-csrf"), Slots: 1, LocalAPIAddr: local})
	waitFor(t, 10*time.Second, "the agent-local API", func() bool { return localGet(t, local, "/api/v1/queue/status") != nil })
	marker := filepath.Join(t.TempDir(), "pwned")

	// A page of another origin (another port), with no policy of its own
	// to hold it back, as a hostile site's would have none.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><title>elsewhere</title>"))
	}))
	defer page.Close()
	run := browserSteps(t, newBrowser(t, chromium))
	var status string
	run("a page posts to the local API and reads it", 30*time.Second,
		chromedp.Navigate(page.URL),
		chromedp.Evaluate(fmt.Sprintf(`fetch("http://%s/api/v1/tasks", {method: "POST", mode: "no-cors",
			headers: {"Content-Type": "text/plain"}, body: JSON.stringify({name: "from a page", command: "touch", args: [%q]})})
			.then(() => "sent", e => "blocked: " + e)`, local, marker), &status, awaitPromise),
	)
	t.Logf("the page's POST: %s", status)
	time.Sleep(3 * time.Second) // a queued task would have run by now
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the page's task ran on the agent")
	}
	if list := localGet(t, local, "/api/v1/tasks"); list == nil {
		t.Fatal("the local API does not answer curl")
	} else if tasks, _ := list["tasks"].([]any); len(tasks) != 0 {
		t.Errorf("the page queued a task: %v", tasks)
	}
}
