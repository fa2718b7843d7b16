package e2e

import (
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleActsInABrowser drives the console's pages that act and
// report (docs/console.md) in headless Chromium: a task created through
// the form lands on its page, with every field as it was typed; it is
// cancelled with a reason, retried, and a cancel the server refuses is
// shown with its code; a create the server refuses shows its message and
// keeps the form; a group created through the API is listed, shows its
// members, is started (its members' tasks linked) and cancelled; the
// audit log shows the task's creation and cancellations, filtered by
// resource and action; the usage page shows the day's metered attempt.
func TestConsoleActsInABrowser(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	w := newWorld(t)
	key := w.s.DemoAPIKey

	// Usage to report: an attempt that ran for over a second, reported
	// over the agent protocol by an agent the test plays.
	tok := w.agentToken("console-meter")
	metered := w.submit(key, map[string]any{"name": "metered", "type": "shell", "command": "true"})
	attempt := w.claimREST(tok, "console-meter", metered)
	agentStep := func(step string, body map[string]any) {
		body["agent_id"], body["attempt_id"] = "console-meter", attempt
		if code, resp, _ := w.call("POST", "/api/v1/agent/tasks/"+metered+"/"+step, tok, body); code != 200 {
			t.Fatalf("%s: %d %v", step, code, resp)
		}
	}
	agentStep("start", map[string]any{})
	time.Sleep(1200 * time.Millisecond)
	agentStep("complete", map[string]any{"exit_code": 0})
	w.waitStatus(key, metered, 30*time.Second, "completed")

	// A group of two members on a machine no agent serves: started, its
	// tasks stay pending. Its name looks like markup, and must show as
	// the text it is.
	member := func(id, name string) map[string]any {
		return map[string]any{"id": id, "name": name, "command": "true", "machine_id": "console-idle-m"}
	}
	group := w.createGroup(key, map[string]any{"name": "console-group <em>new</em>", "mode": "serial", "start": false,
		"tasks": []any{member("prepare", "prepare data"), member("train", "train model")}})

	run := signedInConsole(t, w, chromium, key)
	poll := pollJS
	text := func(sel string) string {
		var s string
		run("read "+sel, 10*time.Second, chromedp.Text(sel, &s, chromedp.ByQuery))
		return s
	}
	var navLinks []string
	run("the navigation", 10*time.Second,
		chromedp.Evaluate(`[...document.querySelectorAll('#nav a')].map(a => a.getAttribute('href'))`, &navLinks))
	for _, want := range []string{"#/tasks", "#/groups", "#/audit", "#/usage"} {
		if !slices.Contains(navLinks, want) {
			t.Errorf("the navigation %v has no %s", navLinks, want)
		}
	}

	// Create a task through the form, from the task list's link.
	run("open the form from the list", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks"),
		chromedp.Click(`#new-task-link`, chromedp.ByID),
		chromedp.WaitVisible(`#create-task`, chromedp.ByID),
		chromedp.SendKeys(`input[name="name"]`, "made in the console", chromedp.ByQuery),
		chromedp.SetValue(`select[name="type"]`, "python", chromedp.ByQuery),
		chromedp.SendKeys(`textarea[name="command"]`, "python3", chromedp.ByQuery),
		chromedp.SendKeys(`textarea[name="args"]`, "-c\nprint('hi there')\n", chromedp.ByQuery),
		chromedp.SendKeys(`input[name="workdir"]`, "/tmp/console-work", chromedp.ByQuery),
		chromedp.SendKeys(`textarea[name="env"]`, "GREETING=hello world\nEMPTY=\n", chromedp.ByQuery),
		chromedp.SendKeys(`input[name="priority"]`, "3", chromedp.ByQuery),
		chromedp.SendKeys(`input[name="timeout"]`, "120", chromedp.ByQuery),
		chromedp.SendKeys(`input[name="max_retries"]`, "1", chromedp.ByQuery),
		chromedp.Click(`#create-task`, chromedp.ByID),
		poll(`location.hash.startsWith('#/tasks/') && location.hash !== '#/tasks/new'`),
		poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'pending'`),
	)
	var hash string
	run("the new task's address", 5*time.Second, chromedp.Evaluate(`location.hash`, &hash))
	made := strings.TrimPrefix(hash, "#/tasks/")
	task := w.task(key, made)
	want := map[string]any{"name": "made in the console", "type": "python", "command": "python3", "args": []any{"-c", "print('hi there')"},
		"workdir": "/tmp/console-work", "env": map[string]any{"GREETING": "hello world", "EMPTY": ""}, "priority": float64(3),
		"timeout": float64(120), "max_retries": float64(1), "status": "pending"}
	for k, v := range want {
		if !reflect.DeepEqual(task[k], v) {
			t.Errorf("the task created through the form has %s %#v, want %#v", k, task[k], v)
		}
	}

	// Cancel it with a reason: the page shows it cancelled, why, and
	// offers a retry instead.
	run("cancel the task", 30*time.Second,
		chromedp.WaitVisible(`#task-cancel`, chromedp.ByID),
		chromedp.SendKeys(`#cancel-reason`, "not needed after all", chromedp.ByID),
		chromedp.Click(`#task-cancel`, chromedp.ByID),
		poll(`document.querySelector('[data-task-status]').textContent === 'cancelled'`),
		chromedp.WaitVisible(`#task-retry`, chromedp.ByID),
		chromedp.WaitNotVisible(`#task-cancel`, chromedp.ByID),
	)
	if msg := text(`[data-task-message]`); !strings.Contains(msg, "not needed after all") {
		t.Errorf("the cancelled task's message reads %q", msg)
	}
	if msg := text(`#task-action-status`); msg != "Task cancelled." {
		t.Errorf("the cancel reads %q", msg)
	}
	if got := w.task(key, made); got["status"] != "cancelled" {
		t.Errorf("after the page's cancel the task is %v", got["status"])
	}
	// Retry: pending again, and the page follows it again, so a cancel
	// made elsewhere shows.
	run("retry the task", 30*time.Second,
		chromedp.Click(`#task-retry`, chromedp.ByID),
		poll(`document.querySelector('[data-task-status]').textContent === 'pending'`),
		chromedp.WaitVisible(`#task-cancel`, chromedp.ByID),
	)
	if code, resp, _ := w.call("POST", "/api/v1/tasks/"+made+"/cancel", key, map[string]any{"reason": "from the API"}); code != 200 {
		t.Fatalf("cancel through the API: %d %v", code, resp)
	}
	run("the page follows the retried task", 30*time.Second,
		poll(`document.querySelector('[data-task-status]').textContent === 'cancelled'`),
		poll(`document.querySelector('[data-task-message]').textContent.includes('from the API')`),
	)
	// A cancel the server refuses (as from a page that had not yet heard
	// of the other one) is shown with its code and message.
	run("a refused cancel", 30*time.Second,
		chromedp.Evaluate(`document.querySelector('form[aria-label="Cancel the task"]').requestSubmit()`, nil),
		poll(`document.getElementById('task-action-status').textContent.includes('failed')`),
	)
	if msg := text(`#task-action-status`); !strings.Contains(msg, "Cancelling the task failed. 30002: ") {
		t.Errorf("the refused cancel reads %q", msg)
	}

	// A refused create: the server's code and message, the form as it was,
	// the field it names marked.
	var kept struct {
		Hash, Name, Workdir, Invalid string
	}
	run("a refused create", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks/new"),
		chromedp.WaitVisible(`#create-task`, chromedp.ByID),
		chromedp.SendKeys(`input[name="name"]`, "relative", chromedp.ByQuery),
		chromedp.SendKeys(`textarea[name="command"]`, "pwd", chromedp.ByQuery),
		chromedp.SendKeys(`input[name="workdir"]`, "runs/today", chromedp.ByQuery),
		chromedp.Click(`#create-task`, chromedp.ByID),
		poll(`document.getElementById('create-status').textContent.includes('30005')`),
		chromedp.Evaluate(`({hash: location.hash, name: document.querySelector('input[name="name"]').value,
			workdir: document.querySelector('input[name="workdir"]').value,
			invalid: document.querySelector('input[name="workdir"]').getAttribute('aria-invalid') || ''})`, &kept),
	)
	if msg := text(`#create-status`); !strings.HasPrefix(msg, "The task was not created. 30005: ") || !strings.Contains(msg, "workdir") ||
		!strings.Contains(msg, "absolute path") {
		t.Errorf("the refused create reads %q", msg)
	}
	if kept.Hash != "#/tasks/new" || kept.Name != "relative" || kept.Workdir != "runs/today" || kept.Invalid != "true" {
		t.Errorf("after the refusal the form is %+v", kept)
	}
	var live string
	run("the refusal is announced", 5*time.Second,
		chromedp.AttributeValue(`#create-status`, "aria-live", &live, nil, chromedp.ByID))
	if live != "polite" {
		t.Errorf("the create's status is not a live region: aria-live %q", live)
	}

	// The group: listed, then its page with its members.
	run("the groups list", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/groups"),
		poll(fmt.Sprintf(`document.querySelector('[data-group="%s"]') !== null`, group)),
	)
	var markup bool
	run("the group's name is text", 5*time.Second,
		chromedp.Evaluate(`document.querySelector('main em') !== null`, &markup))
	if markup {
		t.Error("the group's name was inserted as markup")
	}
	if row := text(fmt.Sprintf(`[data-group="%s"]`, group)); !strings.Contains(row, "console-group <em>new</em>") || !strings.Contains(row, "serial") ||
		!strings.Contains(row, "pending") {
		t.Errorf("the group's row reads %q", row)
	}
	type memberRow struct {
		ID, Text, Status, Task string
	}
	members := func() []memberRow {
		var rows []memberRow
		run("read the members", 10*time.Second, chromedp.Evaluate(`[...document.querySelectorAll('[data-member]')].map(r => ({
			id: r.dataset.member, text: r.textContent, status: r.querySelector('[data-member-status]').textContent,
			task: (r.querySelector('[data-member-task]')||{dataset:{}}).dataset.memberTask || ''}))`, &rows))
		return rows
	}
	run("open the group", 30*time.Second,
		chromedp.Click(fmt.Sprintf(`[data-group="%s"] a`, group), chromedp.ByQuery),
		poll(`(document.querySelector('[data-group-status]')||{}).textContent === 'pending'`),
		poll(`document.querySelectorAll('[data-member]').length === 2`),
		chromedp.WaitVisible(`#group-start`, chromedp.ByID),
	)
	if rows := members(); rows[0].ID != "prepare" || !strings.Contains(rows[0].Text, "prepare data") || rows[0].Status != "pending" ||
		!strings.Contains(rows[0].Text, "not released yet") || rows[1].ID != "train" || !strings.Contains(rows[1].Text, "train model") {
		t.Errorf("the pending group's members read %+v", rows)
	}
	run("start the group", 30*time.Second,
		chromedp.Click(`#group-start`, chromedp.ByID),
		poll(`document.querySelector('[data-group-status]').textContent === 'running'`),
		poll(`document.querySelectorAll('[data-member-task]').length === 2`),
		chromedp.WaitNotVisible(`#group-start`, chromedp.ByID),
	)
	rows := members()
	g := w.group(key, group)
	for i, m := range g["tasks"].([]any) {
		m := m.(map[string]any)
		if rows[i].ID != m["id"] || rows[i].Task != m["task_id"] || rows[i].Status != m["status"] {
			t.Errorf("member %d on the page %+v, through the API %v %v %v", i, rows[i], m["id"], m["task_id"], m["status"])
		}
	}
	run("a member's task", 30*time.Second,
		chromedp.Click(`[data-member="prepare"] a[data-member-task]`, chromedp.ByQuery),
		poll(fmt.Sprintf(`location.hash === '#/tasks/%s'`, rows[0].Task)),
		poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'pending'`),
		poll(`document.querySelector('tbody').textContent.includes('prepare data')`),
	)
	run("cancel the group", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/groups/"+group),
		chromedp.WaitVisible(`#group-cancel`, chromedp.ByID),
		chromedp.SendKeys(`#group-cancel-reason`, "plans changed", chromedp.ByID),
		chromedp.Click(`#group-cancel`, chromedp.ByID),
		poll(`document.querySelector('[data-group-status]').textContent === 'cancelled'`),
		poll(`[...document.querySelectorAll('[data-member-status]')].every(s => s.textContent === 'cancelled')`),
		chromedp.WaitNotVisible(`#group-cancel`, chromedp.ByID),
	)
	if g := w.group(key, group); g["status"] != "cancelled" {
		t.Errorf("after the page's cancel the group is %v", g["status"])
	}

	// The audit log: the task's creation, its two cancellations and the
	// retry, newest first, once the log has them.
	waitFor(t, 30*time.Second, "the task's audit entries", func() bool {
		_, body, _ := w.call("GET", "/api/v1/audit-logs?resource=task&resource_id="+made, key, nil)
		n := map[string]int{}
		l, _ := body["audit_logs"].([]any)
		for _, e := range l {
			n[fmt.Sprint(e.(map[string]any)["action"])]++
		}
		return n["task.created"] == 1 && n["task.cancelled"] == 2 && n["task.retry_scheduled"] == 1
	})
	var actions []string
	var auditHash string
	run("filter the audit log", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/audit"),
		poll(`(document.getElementById('audit-status')||{textContent:''}).textContent.includes('entr')`),
		chromedp.SetValue(`select[name="resource"]`, "task", chromedp.ByQuery),
		chromedp.SendKeys(`input[name="action"]`, "cancelled", chromedp.ByQuery),
		chromedp.Click(`form[role="search"] button[type="submit"]`, chromedp.ByQuery),
		poll(`location.hash === '#/audit?resource=task&action=cancelled' && (document.getElementById('audit-status')||{textContent:''}).textContent.includes('entr')`),
		chromedp.Evaluate(`[...document.querySelectorAll('[data-action]')].map(r => r.dataset.action)`, &actions),
		chromedp.Evaluate(`location.hash`, &auditHash),
	)
	// The cancelled group's two pending members were cancelled too.
	if len(actions) < 2 || !allEqual(actions, "task.cancelled") {
		t.Errorf("resource task, action cancelled shows %v", actions)
	}
	if rowText := text(`tbody`); strings.Count(rowText, made) != 2 || !strings.Contains(rowText, "from the API") ||
		!strings.Contains(rowText, "not needed after all") {
		t.Errorf("the cancellations read %q", rowText)
	}
	run("the task's own audit entries", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks/"+made),
		poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'cancelled'`),
		chromedp.Click(`//a[text()="Audit log of this task"]`, chromedp.BySearch),
		poll(fmt.Sprintf(`location.hash === '#/audit?resource=task&resource_id=%s' && (document.getElementById('audit-status')||{textContent:''}).textContent.includes('entr')`,
			url.QueryEscape(made))),
		chromedp.Evaluate(`[...document.querySelectorAll('[data-action]')].map(r => r.dataset.action)`, &actions),
	)
	if want := []string{"task.cancelled", "task.retry_scheduled", "task.cancelled", "task.created"}; !reflect.DeepEqual(actions, want) {
		t.Errorf("the task's audit log shows %v, want %v (newest first)", actions, want)
	}

	// Usage: by day (the metered attempt today), then by queue.
	waitFor(t, 30*time.Second, "the attempt's usage", func() bool {
		_, body, _ := w.call("GET", "/api/v1/usage?group_by=day", key, nil)
		total, _ := body["total"].(map[string]any)
		return total != nil && fmt.Sprint(total["items"]) == "1"
	})
	today := time.Now().UTC().Format(time.DateOnly)
	var day, total []string
	var head, said string
	run("usage by day", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/usage"),
		poll(fmt.Sprintf(`document.querySelector('[data-usage-key="%s"]') !== null`, today)),
		chromedp.Evaluate(fmt.Sprintf(`[...document.querySelector('[data-usage-key="%s"]').children].map(c => c.textContent)`, today), &day),
		chromedp.Evaluate(`[...document.querySelector('[data-usage-total]').children].map(c => c.textContent)`, &total),
		chromedp.Text(`#usage-table thead th`, &head, chromedp.ByQuery),
		chromedp.Text(`#usage-status`, &said, chromedp.ByID),
	)
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
	tomorrow := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
	if wantSaid := "1 row of usage from " + month + " 00:00 UTC up to " + tomorrow + " 00:00 UTC."; said != wantSaid {
		t.Errorf("the usage page says %q, want %q", said, wantSaid)
	}
	// Key, GPU, CPU, video, stage seconds, items, amount.
	if len(day) != 7 || head != "Day" || day[0] != today || day[5] != "1" || !strings.HasSuffix(day[6], " USD") ||
		!reflect.DeepEqual(day[1:], total[1:]) || total[0] != "Total" {
		t.Errorf("usage by day: head %q, row %q, total %q", head, day, total)
	}
	if cpu, err := strconv.ParseFloat(strings.ReplaceAll(day[2], ",", ""), 64); err != nil || cpu < 1 {
		t.Errorf("the attempt ran over a second; its CPU seconds read %q", day[2])
	}
	var byQueue []string
	run("usage by queue", 30*time.Second,
		chromedp.SetValue(`select[name="group_by"]`, "queue", chromedp.ByQuery),
		chromedp.Click(`#usage-show`, chromedp.ByID),
		poll(`document.querySelector('[data-usage-key="-"]') !== null`),
		chromedp.Evaluate(`[...document.querySelector('[data-usage-key="-"]').children].map(c => c.textContent)`, &byQueue),
		chromedp.Text(`#usage-table thead th`, &head, chromedp.ByQuery),
	)
	if head != "Queue" || len(byQueue) != 7 || byQueue[5] != "1" {
		t.Errorf("usage by queue: head %q, row %q", head, byQueue)
	}

	// The new pages fit a narrow screen.
	for _, page := range []string{"#/tasks/new", "#/groups/" + group, "#/audit", "#/usage"} {
		var fits bool
		run("narrow "+page, 30*time.Second,
			chromedp.EmulateViewport(390, 844),
			chromedp.Navigate(w.s.HTTPURL+"/ui/"+page),
			poll(`document.querySelector('main h1') !== null && !document.body.textContent.includes('Loading…')`),
			chromedp.Evaluate(`document.documentElement.scrollWidth <= window.innerWidth`, &fits),
			chromedp.EmulateViewport(1280, 900),
		)
		if !fits {
			t.Errorf("%s is wider than a 390-pixel screen", page)
		}
	}
}

func allEqual(list []string, s string) bool {
	for _, v := range list {
		if v != s {
			return false
		}
	}
	return true
}
