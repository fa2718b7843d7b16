package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleTasksPageInABrowser drives the console's tasks page and its
// edges in headless Chromium (docs/console.md): a name search that reaches
// past the newest page, a failed task that shows why it failed rather
// than its last progress message, a task deleted while it is watched, a
// long name on a narrow screen, an address the console has no page for,
// a mangled job link and a job id typed in upper case.
func TestConsoleTasksPageInABrowser(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	w := newWorld(t)
	key := w.s.DemoAPIKey
	// No agent serves this machine: these tasks stay pending.
	pending := func(name string) string {
		return w.submit(key, map[string]any{"name": name, "type": "shell", "command": "true", "machine_id": "console-idle-m"})
	}
	oldest := pending("needle-oldest")
	for i := range 110 {
		pending(fmt.Sprint("filler-", i))
	}
	long := pending(strings.Repeat("x", 255))

	// A task that reported progress, then failed.
	tok := w.agentToken("console-agent")
	failed := w.submit(key, map[string]any{"name": "fails-after-progress", "type": "shell", "command": "true", "max_retries": 0})
	attempt := w.claimREST(tok, "console-agent", failed)
	for _, step := range []struct {
		path string
		body map[string]any
	}{
		{"/start", map[string]any{}},
		{"/progress", map[string]any{"progress": 20, "message": "loading data"}},
		{"/complete", map[string]any{"exit_code": 4}},
	} {
		step.body["agent_id"], step.body["attempt_id"] = "console-agent", attempt
		if code, resp, _ := w.call("POST", "/api/v1/agent/tasks/"+failed+step.path, tok, step.body); code != 200 {
			t.Fatalf("%s: %d %v", step.path, code, resp)
		}
	}
	failedTask := w.waitStatus(key, failed, 30*time.Second, "failed")
	reason, _ := failedTask["error"].(string)
	if reason == "" {
		t.Fatalf("the failed task has no error: %v", failedTask)
	}
	w.waitListed(key, failed)

	run := signedInConsole(t, w, chromium, key)
	poll := pollJS

	// The oldest task is past the first page of 100: the name search reads
	// on until it finds it.
	var found bool
	var listStatus string
	run("a name search past the newest page", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks"),
		poll(`document.querySelector('#tasks-status').textContent.includes('tasks')`),
		chromedp.SendKeys(`input[name="name"]`, "needle-old", chromedp.ByQuery),
		chromedp.Click(`form[role="search"] button[type="submit"]`, chromedp.ByQuery),
		poll(`document.querySelector('#tasks-status').textContent.includes('needle-old')`),
		chromedp.Evaluate(fmt.Sprintf(`document.querySelector('tbody').textContent.includes('needle-oldest') && document.querySelectorAll('tbody tr').length === 1 && [...document.querySelectorAll('tbody button')].some(b => %q.startsWith(b.textContent))`, oldest), &found),
		chromedp.Text(`#tasks-status`, &listStatus, chromedp.ByID),
	)
	if !found || !strings.HasPrefix(listStatus, "1 task whose name contains “needle-old” among the newest 113 (") {
		t.Errorf("the name search found the oldest task: %v; it reads %q", found, listStatus)
	}

	// Without a name, a page of 100, then "Show more" for the rest.
	var rows int
	run("paging", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/video"),
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks"),
		poll(`document.querySelector('#tasks-status').textContent.includes('Show more')`),
		chromedp.Evaluate(`document.querySelectorAll('tbody tr').length`, &rows),
	)
	if rows != 100 {
		t.Errorf("the first page shows %d tasks, want 100", rows)
	}
	run("show more", 30*time.Second,
		chromedp.Click(`#tasks-more`, chromedp.ByID),
		poll(`document.querySelectorAll('tbody tr').length > 100 && document.getElementById('tasks-more').hidden`),
		chromedp.Evaluate(`document.querySelectorAll('tbody tr').length`, &rows),
	)
	if rows != 113 {
		t.Errorf("after Show more the list has %d tasks, want all 113", rows)
	}

	// A 255-character name wraps in its cell: nothing scrolls sideways,
	// on a wide screen or a narrow one.
	var wideFits, narrowFits bool
	run("a long name", 20*time.Second,
		chromedp.Evaluate(`document.documentElement.scrollWidth <= window.innerWidth`, &wideFits),
		chromedp.EmulateViewport(390, 844),
		chromedp.Evaluate(`document.documentElement.scrollWidth <= window.innerWidth`, &narrowFits),
		chromedp.EmulateViewport(1280, 900),
	)
	if !wideFits || !narrowFits {
		t.Errorf("the tasks page with task %s fits the screen: at 1280 px %v, at 390 px %v", long, wideFits, narrowFits)
	}

	// The failed task shows why it failed, not "loading data", at the top
	// of the page where it opens.
	var message string
	var top float64
	run("a failed task", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks/"+failed),
		poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'failed'`),
		poll(`document.querySelector('[data-task-message]').textContent !== ''`),
		chromedp.Text(`[data-task-message]`, &message, chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById('task-detail').getBoundingClientRect().top`, &top),
	)
	if message != reason {
		t.Errorf("the failed task's message reads %q, want its error %q", message, reason)
	}
	if top < 0 || top > 900 {
		t.Errorf("the task's detail starts at y=%v, outside the screen", top)
	}

	// A task deleted while it is watched is shown deleted.
	doomed := pending("deleted-while-watched")
	run("watch a task", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks/"+doomed),
		poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'pending'`),
	)
	if code, resp, _ := w.call("DELETE", "/api/v1/tasks/"+doomed, key, nil); code != 200 {
		t.Fatalf("delete: %d %v", code, resp)
	}
	run("the watched task is deleted", 30*time.Second,
		poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'deleted'`),
		chromedp.Text(`[data-task-message]`, &message, chromedp.ByQuery),
	)
	if message != "This task was deleted." {
		t.Errorf("the deleted task's message reads %q", message)
	}

	// An address with no page says so; a mangled job link and an
	// upper-case job id are answered, not thrown or called lost.
	var heading, findStatus string
	run("an unknown page", 20*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/queues"),
		chromedp.Text(`h1`, &heading, chromedp.ByQuery),
	)
	if heading != "No such page" {
		t.Errorf("#/queues shows %q", heading)
	}
	run("a mangled job link", 20*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/pipeline/%E0%A4%A"),
		poll(`document.querySelector('#find-status').textContent !== ''`),
		chromedp.Text(`#find-status`, &findStatus, chromedp.ByID),
	)
	if !strings.Contains(findStatus, "does not hold a job id") {
		t.Errorf("a mangled job link reads %q", findStatus)
	}
	upper := "00000000-0000-4000-8000-00000000BEEF"
	run("an upper-case job id", 20*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/pipeline/"+upper),
		poll(`document.querySelector('#find-status').textContent !== ''`),
		chromedp.Text(`#find-status`, &findStatus, chromedp.ByID),
	)
	if !strings.Contains(findStatus, strings.ToLower(upper)) {
		t.Errorf("an upper-case job id was looked up as %q", findStatus)
	}
}
