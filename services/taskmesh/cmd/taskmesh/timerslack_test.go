package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/platform/timerslack"
)

// A server refuses a timer slack that makes no sense, naming the
// variable; other commands never look at it. (Setting a slack executes the
// program again: platform/timerslack's tests do that in a process of
// their own.)
func TestServerTimerSlack(t *testing.T) {
	for _, bad := range []string{"fast", "0", "5s"} {
		t.Setenv(timerslack.EnvVar, bad)
		for _, server := range []string{"gateway", "scheduler", "quota", "consumers", "broker", "executor", "dev", "bench"} {
			err := serverTimerSlack([]string{"taskmesh", server, "--help"})
			if err == nil || errors.Is(err, timerslack.ErrNotApplied) || !strings.Contains(err.Error(), timerslack.EnvVar) {
				t.Errorf("%s with %s=%q: %v, want a refusal naming the variable", server, timerslack.EnvVar, bad, err)
			}
		}
		for _, other := range [][]string{{"taskmesh"}, {"taskmesh", "executor", "shim", "serve"}, {"taskmesh", "ctl", "tasks"}, {"taskmesh", "replay"}, {"taskmesh", "chaos"}, {"taskmesh", "version"}} {
			if err := serverTimerSlack(other); err != nil {
				t.Errorf("%v with %s=%q: %v, want the command left alone", other, timerslack.EnvVar, bad, err)
			}
		}
	}
	// The slack this process has, or none asked for: nothing to do.
	cur, err := timerslack.Current()
	if err != nil {
		t.Skip(err)
	}
	for _, env := range []string{cur.String(), "off"} {
		t.Setenv(timerslack.EnvVar, env)
		if err := serverTimerSlack([]string{"taskmesh", "scheduler"}); err != nil {
			t.Errorf("%s=%q: %v", timerslack.EnvVar, env, err)
		}
	}
}
