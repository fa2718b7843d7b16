package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
)

// The web console in a real browser (headless Chromium driven over the
// DevTools protocol): sign in with an API key, upload a model and its
// quantization archive, watch the job reach COMPLETED, download the NEF
// (its bytes are the stored result), open the job's stage task on the
// tasks page, see a job the system no longer knows reported as lost to a
// restart, and generate a video whose MP4 plays in the page. On a
// failure a screenshot is kept as a test artefact.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Fatalf("ffmpeg is required for the video page (apt-get install -y ffmpeg): %v", err)
	}
	w := newWorld(t)
	w.startPools(4)
	key := w.s.DemoAPIKey
	dir := t.TempDir()
	model, quant := filepath.Join(dir, "model.onnx"), filepath.Join(dir, "quant.zip")
	if err := os.WriteFile(model, onnxModel(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(quant, quantZip(t), 0o644); err != nil {
		t.Fatal(err)
	}
	downloads := filepath.Join(dir, "downloads")
	if err := os.Mkdir(downloads, 0o755); err != nil {
		t.Fatal(err)
	}

	ctx := newBrowser(t, chromium)
	run := browserSteps(t, ctx)

	// Signed out, only the sign-in form shows: not the navigation.
	var navShown bool
	run("the sign-in page", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/"),
		chromedp.WaitVisible(`#api-key`, chromedp.ByID),
		chromedp.Evaluate(`document.getElementById('nav').offsetParent !== null`, &navShown),
	)
	if navShown {
		t.Error("the navigation shows before a key signed in")
	}
	run("sign in", 30*time.Second,
		chromedp.SendKeys(`#api-key`, key, chromedp.ByID),
		chromedp.Click(`#sign-in`, chromedp.ByID),
		chromedp.WaitVisible(`#submit-job`, chromedp.ByID),
	)
	run("upload and start a job", 30*time.Second,
		chromedp.SetUploadFiles(`input[name="model"]`, []string{model}, chromedp.ByQuery),
		chromedp.SetUploadFiles(`input[name="quant"]`, []string{quant}, chromedp.ByQuery),
		chromedp.Click(`#submit-job`, chromedp.ByID),
		chromedp.WaitVisible(`[data-job]`, chromedp.ByQuery),
	)
	var jobID string
	run("the job completes", 2*time.Minute,
		chromedp.Poll(`document.querySelector('[data-job-status]').textContent === 'COMPLETED'`, nil, chromedp.WithPollingInterval(200*time.Millisecond)),
		chromedp.AttributeValue(`[data-job]`, "data-job", &jobID, nil, chromedp.ByQuery),
		chromedp.WaitVisible(`a[data-download="nef"]`, chromedp.ByQuery),
	)

	// Download the NEF as a user would: a click, the browser saves it.
	done := make(chan string, 1)
	chromedp.ListenTarget(ctx, func(ev any) {
		if p, ok := ev.(*browser.EventDownloadProgress); ok && p.State == browser.DownloadProgressStateCompleted {
			select {
			case done <- p.GUID:
			default:
			}
		}
	})
	run("download the NEF", 30*time.Second,
		browser.SetDownloadBehavior(browser.SetDownloadBehaviorBehaviorAllowAndName).WithDownloadPath(downloads).WithEventsEnabled(true),
		chromedp.Click(`a[data-download="nef"]`, chromedp.ByQuery),
	)
	var guid string
	select {
	case guid = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the NEF download did not complete")
	}
	got, err := os.ReadFile(filepath.Join(downloads, guid))
	if err != nil {
		t.Fatal(err)
	}
	// The same bytes as the stored result.nef, read back through the API.
	_, dl, _ := w.call("GET", "/jobs/"+jobID+"/downloads", key, nil)
	_, want := get(t, dl["nef_url"].(string))
	_, bie := get(t, dl["bie_url"].(string))
	if len(got) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("the downloaded NEF (%d bytes) is not the stored result.nef (%d bytes)", len(got), len(want))
	}
	checkNEF(t, got, bie)

	// On a phone-sized screen the page fits its width (nothing scrolls
	// sideways) and the job is still there.
	var fits bool
	run("a narrow screen", 20*time.Second,
		chromedp.EmulateViewport(390, 844),
		chromedp.Poll(`document.querySelector('[data-job-status]') !== null`, nil, chromedp.WithPollingInterval(100*time.Millisecond)),
		chromedp.Evaluate(`document.documentElement.scrollWidth <= window.innerWidth`, &fits),
		chromedp.EmulateViewport(1280, 900),
	)
	if !fits {
		t.Error("the pipeline page is wider than a 390-pixel screen")
	}

	// The job's stage tasks on the tasks page, live.
	_, j, _ := w.call("GET", "/jobs/"+jobID, key, nil)
	nefTask := j["stage_tasks"].(map[string]any)["nef"].(string)
	run("a stage task on the tasks page", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks/"+nefTask),
		chromedp.Poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'completed'`, nil, chromedp.WithPollingInterval(200*time.Millisecond)),
		chromedp.WaitVisible(`//td[contains(., "pipeline nef")]`, chromedp.BySearch),
	)

	// A job the system does not know (as after a restart that lost it) is
	// shown as such, and forgotten.
	var gone bool
	run("an unknown job", 30*time.Second,
		chromedp.Evaluate(`sessionStorage.setItem('taskmesh.jobs', JSON.stringify(['00000000-0000-4000-8000-00000000dead']))`, nil),
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/pipeline"),
		chromedp.Poll(`document.body.textContent.includes('系統已重啟,請重新送出 — This job is not known any more: the system restarted. Please submit it again')`, nil,
			chromedp.WithPollingInterval(200*time.Millisecond)),
		chromedp.Evaluate(`!sessionStorage.getItem('taskmesh.jobs').includes('dead')`, &gone),
	)
	if !gone {
		t.Error("the unknown job was not forgotten")
	}

	// A job this tab did not start is looked up by its id; an id no job
	// has gets the same words.
	var notFound string
	run("look a job up by its id", 30*time.Second,
		chromedp.Evaluate(`sessionStorage.removeItem('taskmesh.jobs')`, nil),
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/pipeline"),
		chromedp.WaitVisible(`#job-id`, chromedp.ByID),
		chromedp.SendKeys(`#job-id`, "00000000-0000-4000-8000-00000000beef", chromedp.ByID),
		chromedp.Click(`#find-job-submit`, chromedp.ByID),
		chromedp.Poll(`document.querySelector('#find-status').textContent.includes('系統已重啟,請重新送出')`, nil,
			chromedp.WithPollingInterval(100*time.Millisecond)),
		chromedp.Text(`#find-status`, &notFound, chromedp.ByID),
		chromedp.Evaluate(`document.getElementById('job-id').value = ''`, nil),
		chromedp.SendKeys(`#job-id`, " "+jobID+" ", chromedp.ByID),
		chromedp.Click(`#find-job-submit`, chromedp.ByID),
		chromedp.Poll(fmt.Sprintf(`(document.querySelector('[data-job="%s"] [data-job-status]')||{}).textContent === 'COMPLETED'`, jobID), nil,
			chromedp.WithPollingInterval(200*time.Millisecond)),
		chromedp.WaitVisible(fmt.Sprintf(`[data-job="%s"] a[data-download="nef"]`, jobID), chromedp.ByQuery),
	)
	if !strings.Contains(notFound, "00000000-0000-4000-8000-00000000beef") {
		t.Errorf("an unknown id reads %q", notFound)
	}
	// A link to the job (#/pipeline/{job_id}) shows it in a fresh tab.
	run("a link to a job", 30*time.Second,
		chromedp.Evaluate(`sessionStorage.removeItem('taskmesh.jobs')`, nil),
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks"),
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/pipeline/"+jobID),
		chromedp.Poll(fmt.Sprintf(`(document.querySelector('[data-job="%s"] [data-job-status]')||{}).textContent === 'COMPLETED'`, jobID), nil,
			chromedp.WithPollingInterval(200*time.Millisecond)),
	)

	// A job whose stage fails is shown FAILED with its step and reason,
	// and its user is asked to submit it again.
	bad := filepath.Join(dir, "bad.onnx")
	if err := os.WriteFile(bad, []byte{0x08, 0x08, 0x6c, 0x01, 0x02}, 0o644); err != nil { // ir_version, then wire type 4
		t.Fatal(err)
	}
	var failed string
	run("a failed job", 2*time.Minute,
		chromedp.Evaluate(`sessionStorage.removeItem('taskmesh.jobs')`, nil),
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/pipeline"),
		chromedp.WaitVisible(`#submit-job`, chromedp.ByID),
		chromedp.SetUploadFiles(`input[name="model"]`, []string{bad}, chromedp.ByQuery),
		chromedp.SetUploadFiles(`input[name="quant"]`, []string{quant}, chromedp.ByQuery),
		chromedp.Click(`#submit-job`, chromedp.ByID),
		chromedp.Poll(`(document.querySelector('[data-job-status]')||{}).textContent === 'FAILED'`, nil,
			chromedp.WithPollingInterval(200*time.Millisecond)),
		chromedp.Text(`[data-job] .error`, &failed, chromedp.ByQuery),
	)
	if !strings.Contains(failed, "The onnx stage failed: model.onnx is not an ONNX model") ||
		!strings.Contains(failed, "Please submit the job again.") {
		t.Errorf("the failed job reads %q", failed)
	}

	run("generate a video", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/video"),
		chromedp.WaitVisible(`#generate`, chromedp.ByID),
		chromedp.SendKeys(`textarea[name="prompt"]`, "a paper boat on a river", chromedp.ByQuery),
		chromedp.Click(`#generate`, chromedp.ByID),
	)
	var ready float64
	run("the video plays", 2*time.Minute,
		chromedp.Poll(`(document.getElementById('video')||{readyState:0}).readyState >= 2`, nil, chromedp.WithPollingInterval(250*time.Millisecond)),
		chromedp.Evaluate(`document.getElementById('video').readyState`, &ready),
	)
	var progress float64
	run("the progress bar is full", 10*time.Second, chromedp.Evaluate(`document.getElementById('video-progress').value`, &progress))
	if ready < 2 || progress != 100 {
		t.Errorf("video readyState %v, progress %v", ready, progress)
	}
}

// requireChromium returns the path of Debian's chromium, failing the test
// when it is not installed.
func requireChromium(t *testing.T) string {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("Chromium is required (apt-get install -y chromium; .ci/run installs it): %v", err)
	}
	return chromium
}

// browserSteps returns run: it runs a named series of browser actions
// on ctx within timeout and fails the test, naming the series, when one
// fails.
func browserSteps(t *testing.T, ctx context.Context) func(what string, timeout time.Duration, actions ...chromedp.Action) {
	return func(what string, timeout time.Duration, actions ...chromedp.Action) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := chromedp.Run(c, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// signedInConsole starts a browser (newBrowser) signed in to w's console
// with key, on its first page, and returns its steps (browserSteps).
func signedInConsole(t *testing.T, w *world, chromium, key string) func(what string, timeout time.Duration, actions ...chromedp.Action) {
	t.Helper()
	run := browserSteps(t, newBrowser(t, chromium))
	run("sign in", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/"),
		chromedp.WaitVisible(`#api-key`, chromedp.ByID),
		chromedp.SendKeys(`#api-key`, key, chromedp.ByID),
		chromedp.Click(`#sign-in`, chromedp.ByID),
		chromedp.WaitVisible(`#submit-job`, chromedp.ByID),
	)
	return run
}

// pollJS waits until the page's expression is true.
func pollJS(expr string) chromedp.Action {
	return chromedp.Poll(expr, nil, chromedp.WithPollingInterval(100*time.Millisecond))
}

// newBrowser starts headless Chromium on a fresh profile and returns its
// context. When the test fails, the page's screenshot is kept: in
// $TASKMESH_TEST_ARTIFACTS, else in a directory the log names.
func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	// A fresh profile of its own, removed once the browser has exited
	// (it writes there until the end, so not in t.TempDir).
	profile, err := os.MkdirTemp("", "tmchromium")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("autoplay-policy", "no-user-gesture-required"),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		// Close the browser and wait for it to exit, then remove its profile.
		_ = chromedp.Cancel(ctx)
		cancel()
		cancelAlloc()
		_ = os.RemoveAll(profile)
	})
	// Start the browser on ctx itself: a browser first started under a
	// context with a timeout would close when that context ends.
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	// Registered last, so it runs first: the browser is still there.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir := os.Getenv("TASKMESH_TEST_ARTIFACTS")
		if dir == "" {
			dir = filepath.Join(os.TempDir(), "taskmesh-test-artifacts")
		}
		var png []byte
		c, stop := context.WithTimeout(ctx, 10*time.Second)
		defer stop()
		if err := chromedp.Run(c, chromedp.FullScreenshot(&png, 100)); err != nil {
			t.Logf("no screenshot: %v", err)
			return
		}
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.png", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix()))
		if err := os.MkdirAll(dir, 0o755); err == nil {
			if err := os.WriteFile(path, png, 0o644); err == nil {
				t.Logf("screenshot of the failure: %s", path)
			}
		}
	})
	return ctx
}
