package e2e

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestConsoleAddressesAndGoneThingsInABrowser drives the console's task
// and group pages at their edges (docs/console.md): a task named by a
// client's id with a space and non-ASCII letters, addresses that are no
// id at all ("." and ".." would take the calls to other routes), a group
// deleted while its page is open, a long group name on a narrow screen,
// and a task page whose live stream cannot be opened.
func TestConsoleAddressesAndGoneThingsInABrowser(t *testing.T) {
	t.Parallel()
	chromium := requireChromium(t)
	w := newWorld(t)
	key := w.s.DemoAPIKey
	// No agent serves this machine: the task stays pending.
	named := w.submit(key, map[string]any{"id": "任務 1", "name": "named", "type": "shell", "command": "true", "machine_id": "console-edge-m"})
	group := func(name string) string {
		code, g, _ := w.call("POST", "/api/v1/task-groups", key, map[string]any{"name": name, "mode": "parallel",
			"tasks": []map[string]any{{"id": "only", "name": "only", "type": "shell", "command": "true"}}})
		id, _ := g["id"].(string)
		if code != 200 || id == "" {
			t.Fatalf("create group: %d %v", code, g)
		}
		return id
	}
	doomed := group("deleted-while-open")
	long := group(strings.Repeat("G", 255))
	// A fan-out's tasks share a group_id that no task group has; no agent
	// serves these machines, so they stay pending.
	code, fan, _ := w.call("POST", "/api/v1/tasks", key, map[string]any{"name": "fan", "type": "shell", "command": "true",
		"targets": map[string]any{"machine_ids": []string{"console-fan-1", "console-fan-2"}}})
	fanGroup, _ := fan["group_id"].(string)
	if code != 200 || fanGroup == "" {
		t.Fatalf("create fan-out: %d %v", code, fan)
	}
	cancelled := w.submit(key, map[string]any{"name": "cancelled-no-stream", "type": "shell", "command": "true", "machine_id": "console-edge-m"})
	if code, resp, _ := w.call("POST", "/api/v1/tasks/"+cancelled+"/cancel", key, map[string]any{}); code != 200 {
		t.Fatalf("cancel: %d %v", code, resp)
	}

	run := signedInConsole(t, w, chromium, key)
	poll := pollJS

	// The address holds the name percent-encoded; the page decodes it once.
	var heading string
	run("a task by a client's name", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks/"+url.PathEscape("任務 1")),
		poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'pending'`),
		chromedp.Evaluate(`document.querySelector('#task-detail a[href^="#/audit"]').getAttribute('href')`, &heading),
	)
	if !strings.HasSuffix(heading, "resource_id="+named) {
		t.Errorf("the task opened by its name links the audit log of %q, want task %s", heading, named)
	}

	for _, addr := range []string{"#/tasks/..", "#/tasks/.", "#/tasks/a%2Fb", "#/tasks/%E0%A4%A", "#/groups/..", "#/groups/a%2Fb"} {
		var says string
		run("the address "+addr, 20*time.Second,
			chromedp.Navigate(w.s.HTTPURL+"/ui/"+addr),
			poll(`document.querySelector('.card.error') !== null`),
			chromedp.Text(`.card.error`, &says, chromedp.ByQuery),
		)
		if !strings.Contains(says, "does not hold a task") {
			t.Errorf("%s reads %q, want that it holds no id", addr, says)
		}
	}

	// A long name wraps in the heading: nothing scrolls sideways.
	var wideFits, narrowFits bool
	run("a long group name", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/groups/"+long),
		poll(`(document.querySelector('[data-group-status]')||{}).textContent === 'pending'`),
		chromedp.Evaluate(`document.documentElement.scrollWidth <= window.innerWidth`, &wideFits),
		chromedp.EmulateViewport(390, 844),
		chromedp.Evaluate(`document.documentElement.scrollWidth <= window.innerWidth`, &narrowFits),
		chromedp.EmulateViewport(1280, 900),
	)
	if !wideFits || !narrowFits {
		t.Errorf("the page of a group with a 255-character name fits the screen: at 1280 px %v, at 390 px %v", wideFits, narrowFits)
	}

	// A group deleted while its page is open is shown deleted, with no
	// actions left.
	run("watch a pending group", 30*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/groups/"+doomed),
		poll(`(document.querySelector('[data-group-status]')||{}).textContent === 'pending' && !document.getElementById('group-start').hidden`),
	)
	if code, resp, _ := w.call("DELETE", "/api/v1/task-groups/"+doomed, key, nil); code != 200 {
		t.Fatalf("delete group: %d %v", code, resp)
	}
	var actions bool
	run("the watched group is deleted", 30*time.Second,
		poll(`(document.querySelector('[data-group-status]')||{}).textContent === 'deleted'`),
		chromedp.Evaluate(`!document.getElementById('group-start').hidden || !document.querySelector('form[aria-label="Cancel the group"]').hidden`, &actions),
	)
	if actions {
		t.Error("the deleted group's page still offers Start or Cancel")
	}

	// A fan-out's group is a view: Cancel is refused (404) while the group
	// still reads, and the page stops offering what no route does.
	var fanActions bool
	var fanSays string
	run("cancel a fan-out's group view", 40*time.Second,
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/groups/"+fanGroup),
		poll(`(document.querySelector('[data-group-status]')||{}).textContent === 'running' && !document.querySelector('form[aria-label="Cancel the group"]').hidden`),
		chromedp.Click(`#group-cancel`, chromedp.ByID),
		poll(`document.querySelector('form[aria-label="Cancel the group"]').hidden`),
		chromedp.Evaluate(`!document.getElementById('group-start').hidden || !document.querySelector('form[aria-label="Cancel the group"]').hidden`, &fanActions),
		chromedp.Evaluate(`document.body.innerText`, &fanSays),
	)
	if fanActions || !strings.Contains(fanSays, "one by one") {
		t.Errorf("after a refused cancel the fan-out's view offers actions: %v; says one by one: %v", fanActions, strings.Contains(fanSays, "one by one"))
	}
	if members, _ := w.group(key, fanGroup)["tasks"].([]any); len(members) != 2 {
		t.Errorf("the fan-out's view after the refused cancel: %v", members)
	} else {
		for _, m := range members {
			if st := m.(map[string]any)["status"]; st != "pending" {
				t.Errorf("a fan-out's task after the refused cancel: %v, want it still pending", m)
			}
		}
	}

	// With every live stream blocked, the task page reads the task: its
	// status, and Retry for a cancelled one.
	var retryShown bool
	var message string
	run("a task page without its stream", 40*time.Second,
		network.Enable(),
		network.SetBlockedURLs([]string{"*/events*"}),
		chromedp.Navigate(w.s.HTTPURL+"/ui/#/tasks/"+cancelled),
		poll(`(document.querySelector('[data-task-status]')||{}).textContent === 'cancelled'`),
		chromedp.Evaluate(`!document.getElementById('task-retry').hidden`, &retryShown),
		chromedp.Text(`[data-task-message]`, &message, chromedp.ByQuery),
		chromedp.ActionFunc(func(ctx context.Context) error { return network.SetBlockedURLs(nil).Do(ctx) }),
	)
	if !retryShown {
		t.Errorf("the cancelled task read without its stream offers no Retry (message %q)", message)
	}
}
