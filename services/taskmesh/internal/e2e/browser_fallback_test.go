package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// breakWebSockets replaces the page's WebSocket with one that fails at
// once (as behind a proxy that refuses upgrades), counting the attempts.
const breakWebSockets = `window.__wsAttempts = 0;
window.WebSocket = class {
  constructor() {
    window.__wsAttempts++;
    this.readyState = 3;
    setTimeout(() => {
      if (this.onerror) this.onerror(new Event("error"));
      if (this.onclose) this.onclose({ code: 1006, reason: "", wasClean: false });
    }, 0);
  }
  send() {}
  close() {}
};`

// The console without its live channels: with every SSE request blocked
// by the browser, a job still reaches COMPLETED on screen through polling
// GET /jobs/{job_id} and its downloads are shown; with WebSockets
// failing, a video generation still finishes and plays through polling.
func TestConsoleFallsBackToPollingWithoutLiveStreams(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Fatalf("ffmpeg is required for the video page (apt-get install -y ffmpeg): %v", err)
	}
	w := newWorld(t)
	w.startPools(4)
	dir := t.TempDir()
	model, quant := filepath.Join(dir, "model.onnx"), filepath.Join(dir, "quant.zip")
	if err := os.WriteFile(model, onnxModel(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(quant, quantZip(t), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx := newBrowser(t, chromium)
	// What the page asked of the network: blocked requests, and the
	// answers it got, by URL path.
	var mu sync.Mutex
	urls := map[network.RequestID]string{}
	var blocked, answered []string
	chromedp.ListenTarget(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			urls[e.RequestID] = e.Request.URL
		case *network.EventLoadingFailed:
			if e.BlockedReason != "" {
				blocked = append(blocked, urls[e.RequestID])
			}
		case *network.EventResponseReceived:
			answered = append(answered, e.Response.URL)
		}
	})
	run := browserSteps(t, ctx)
	run("block the live channels and sign in", 30*time.Second,
		network.Enable(),
		network.SetBlockedURLs([]string{"*/events*"}),
		chromedp.ActionFunc(func(ctx context.Context) error {
			_, err := page.AddScriptToEvaluateOnNewDocument(breakWebSockets).Do(ctx)
			return err
		}),
		chromedp.Navigate(w.s.HTTPURL+"/ui/"),
		chromedp.WaitVisible(`#api-key`, chromedp.ByID),
		chromedp.SendKeys(`#api-key`, w.s.DemoAPIKey, chromedp.ByID),
		chromedp.Click(`#sign-in`, chromedp.ByID),
		chromedp.WaitVisible(`#submit-job`, chromedp.ByID),
	)
	var jobID string
	run("upload and start a job", 30*time.Second,
		chromedp.SetUploadFiles(`input[name="model"]`, []string{model}, chromedp.ByQuery),
		chromedp.SetUploadFiles(`input[name="quant"]`, []string{quant}, chromedp.ByQuery),
		chromedp.Click(`#submit-job`, chromedp.ByID),
		chromedp.WaitVisible(`[data-job]`, chromedp.ByQuery),
		chromedp.AttributeValue(`[data-job]`, "data-job", &jobID, nil, chromedp.ByQuery),
		// The stream is refused: the card says it polls instead.
		chromedp.Poll(`(document.querySelector('[data-job-live]')||{}).textContent.includes('checking every 4 seconds')`, nil,
			chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	run("the job completes through polling, with its downloads", 2*time.Minute,
		chromedp.Poll(`document.querySelector('[data-job-status]').textContent === 'COMPLETED'`, nil, chromedp.WithPollingInterval(200*time.Millisecond)),
		chromedp.WaitVisible(`a[data-download="bie"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`a[data-download="nef"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`a[data-download="nef-log"]`, chromedp.ByQuery),
	)
	var nefURL string
	run("the NEF link", 10*time.Second, chromedp.AttributeValue(`a[data-download="nef"]`, "href", &nefURL, nil, chromedp.ByQuery))
	if code, nef := get(t, nefURL); code != 200 || len(nef) == 0 {
		t.Errorf("the NEF link answers %d with %d bytes", code, len(nef))
	}
	events := regexp.MustCompile(`/jobs/` + jobID + `/events$`)
	job := regexp.MustCompile(`/jobs/` + jobID + `$`)
	mu.Lock()
	var streams, polls int
	for _, u := range blocked {
		if events.MatchString(u) {
			streams++
		}
	}
	for _, u := range answered {
		if events.MatchString(u) {
			t.Errorf("a job stream was answered: %s", u)
		}
		if job.MatchString(u) {
			polls++
		}
	}
	mu.Unlock()
	if streams == 0 || polls == 0 {
		t.Errorf("the page tried the stream %d times and polled the job %d times; want both", streams, polls)
	}

	run("generate a video", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/video"),
		chromedp.WaitVisible(`#generate`, chromedp.ByID),
		chromedp.SendKeys(`textarea[name="prompt"]`, "a paper boat on a river", chromedp.ByQuery),
		chromedp.Click(`#generate`, chromedp.ByID),
		chromedp.Poll(`document.body.textContent.includes('Live updates interrupted; checking every 4 seconds')`, nil,
			chromedp.WithPollingInterval(50*time.Millisecond)),
	)
	var ready, progress, attempts float64
	run("the video plays", 2*time.Minute,
		chromedp.Poll(`(document.getElementById('video')||{readyState:0}).readyState >= 2`, nil, chromedp.WithPollingInterval(250*time.Millisecond)),
		chromedp.Evaluate(`document.getElementById('video').readyState`, &ready),
		chromedp.Evaluate(`document.getElementById('video-progress').value`, &progress),
		chromedp.Evaluate(`window.__wsAttempts`, &attempts),
	)
	if ready < 2 || progress != 100 || attempts < 1 {
		t.Errorf("video readyState %v, progress %v, WebSocket attempts %v", ready, progress, attempts)
	}
}
