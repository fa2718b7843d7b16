package domain

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func member(id string, deps ...string) MemberInput {
	return MemberInput{ID: id, Spec: task.SpecInput{Name: "t-" + id, Command: "true", DependsOn: deps}}
}

func ptr(v int) *int { return &v }

func TestNormalizeRefusesBadGroups(t *testing.T) {
	tests := []struct {
		name      string
		in        Input
		wantField string
		wantText  string // in the message
	}{
		{"unknown mode", Input{Mode: "fanout", Tasks: []MemberInput{member("a")}}, "mode", `"fanout"`},
		{"no tasks", Input{Mode: "serial"}, "tasks", "at least one"},
		{"dag member without id", Input{Mode: "dag", Tasks: []MemberInput{member("a"), member("")}}, "tasks[1].id", "required in dag mode"},
		{"duplicate id", Input{Mode: "dag", Tasks: []MemberInput{member("a"), member("b"), member("a")}}, "tasks[2].id", `duplicate id "a" (also tasks[0])`},
		{"duplicate id in serial", Input{Mode: "serial", Tasks: []MemberInput{member("x"), member("x")}}, "tasks[1].id", `"x"`},
		{"bad id", Input{Mode: "dag", Tasks: []MemberInput{member("a b")}}, "tasks[0].id", `"a b"`},
		{"unknown dependency", Input{Mode: "dag", Tasks: []MemberInput{member("a"), member("b", "zz")}}, "tasks[1].depends_on", `"zz"`},
		{"self dependency", Input{Mode: "dag", Tasks: []MemberInput{member("a"), member("b", "b")}}, "tasks[1].depends_on", `"b" depends on itself`},
		{"cycle", Input{Mode: "dag", Tasks: []MemberInput{member("a", "c"), member("b", "a"), member("c", "b"), member("d")}},
			"depends_on", "a → c → b → a"},
		{"two-node cycle", Input{Mode: "dag", Tasks: []MemberInput{member("root"), member("x", "root", "y"), member("y", "x")}},
			"depends_on", "x → y → x"},
		{"depends_on outside dag", Input{Mode: "serial", Tasks: []MemberInput{member("a"), member("b", "a")}}, "tasks[1].depends_on", "only for dag"},
		{"max_parallel outside parallel", Input{Mode: "dag", MaxParallel: 2, Tasks: []MemberInput{member("a")}}, "max_parallel", "only for mode parallel"},
		{"member with targets", Input{Mode: "parallel", Tasks: []MemberInput{{Spec: task.SpecInput{Name: "n", Command: "c", TargetMachines: []string{"m1"}}}}},
			"tasks[0].targets", "one task"},
		{"member with group_id", Input{Tasks: []MemberInput{{Spec: task.SpecInput{Name: "n", Command: "c", GroupID: "g"}}}}, "tasks[0].group_id", "set by the group"},
		{"member spec invalid", Input{Tasks: []MemberInput{{Spec: task.SpecInput{Name: "n"}}}}, "tasks[0].command", "required"},
		{"member relative workdir", Input{Tasks: []MemberInput{{Spec: task.SpecInput{Name: "n", Command: "c", Workdir: "../../.."}}}},
			"tasks[0].workdir", "absolute path"},
		{"repeat with tasks", Input{Repeat: &RepeatInput{Count: 2, Spec: task.SpecInput{Name: "r", Command: "c"}}, Tasks: []MemberInput{member("a")}}, "tasks", "takes no tasks"},
		{"repeat in serial mode", Input{Mode: "serial", Repeat: &RepeatInput{Count: 2}}, "repeat", "only for mode repeat"},
		{"repeat mode without repeat", Input{Mode: "repeat"}, "repeat", "required"},
		{"repeat count 0", Input{Repeat: &RepeatInput{Count: 0, Spec: task.SpecInput{Name: "r", Command: "c"}}}, "repeat.count", "1 to"},
		{"repeat parallel 0", Input{Repeat: &RepeatInput{Count: 3, Parallel: ptr(0), Spec: task.SpecInput{Name: "r", Command: "c"}}}, "repeat.parallel", "1 to"},
		{"repeat negative backoff", Input{Repeat: &RepeatInput{Count: 3, BackoffSec: ptr(-1), Spec: task.SpecInput{Name: "r", Command: "c"}}}, "repeat.backoff_sec", "0 to"},
		{"repeat template invalid", Input{Repeat: &RepeatInput{Count: 3, Spec: task.SpecInput{Name: "r"}}}, "repeat.template.command", "required"},
		{"group webhook not http", Input{Webhook: "ftp://x/", Tasks: []MemberInput{member("a")}}, "webhook.url", "http or https"},
		{"group webhook with credentials", Input{Webhook: "https://u:p@x/", Repeat: &RepeatInput{Count: 2, Spec: task.SpecInput{Name: "r", Command: "c"}}},
			"webhook.url", "credentials"},
		{"repeat template depends", Input{Repeat: &RepeatInput{Count: 3, Spec: task.SpecInput{Name: "r", Command: "c", DependsOn: []string{"x"}}}}, "repeat.template.depends_on", "depend on nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Normalize(tt.in)
			var ie *task.InvalidError
			if !errors.As(err, &ie) || !errors.Is(err, task.ErrInvalid) {
				t.Fatalf("err = %v, want an InvalidError", err)
			}
			if ie.Field != tt.wantField || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("err = %q (field %q), want field %q mentioning %q", err, ie.Field, tt.wantField, tt.wantText)
			}
		})
	}
}

func TestNormalizeFillsDefaults(t *testing.T) {
	def, err := Normalize(Input{Tasks: []MemberInput{member("a"), member(""), member("c")}})
	if err != nil {
		t.Fatal(err)
	}
	// The unnamed member holds a placeholder no client's id can equal,
	// until Create gives it its task's id (TestUnnamedMembersAreTheirTasks).
	if def.Mode != ModeSerial || def.Name != "serial group" || len(def.Members) != 3 || def.Members[1].Key != "#2" {
		t.Fatalf("def = %+v", def)
	}
	// Serial: each member waits for the one before.
	if def.Members[0].DependsOn != nil || def.Members[2].DependsOn[0] != "#2" || def.Members[1].Spec.Priority != task.DefaultPriority {
		t.Fatalf("members = %+v", def.Members)
	}
	if _, err := Normalize(Input{Mode: "serial", Tasks: []MemberInput{member("#2"), member("")}}); err == nil {
		t.Fatal("a client's id in the placeholders' form was accepted")
	}
	rep, err := Normalize(Input{Repeat: &RepeatInput{Count: 20, Spec: task.SpecInput{Name: "stress", Command: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Repeat; rep.Mode != ModeRepeat || rep.Name != "stress" || r.Parallel != 1 || r.IntervalSec != 0 || r.Threshold != 0 || r.Spec.MaxRetries != 0 {
		t.Fatalf("repeat = %+v %+v", rep, rep.Repeat)
	}
	// The group's own webhook is kept, trimmed, for both forms.
	if g, err := Normalize(Input{Webhook: " https://hooks.example.com/g ", Tasks: []MemberInput{member("a")}}); err != nil || g.Webhook != "https://hooks.example.com/g" {
		t.Fatalf("group webhook = %q, %v", g.Webhook, err)
	}
	if r, err := Normalize(Input{Webhook: "https://hooks.example.com/r", Repeat: &RepeatInput{Count: 2, Spec: task.SpecInput{Name: "r", Command: "c"}}}); err != nil ||
		r.Webhook != "https://hooks.example.com/r" {
		t.Fatalf("repeat webhook = %q, %v", r.Webhook, err)
	}
	// dag: repeated dependencies count once.
	dag, err := Normalize(Input{Mode: "dag", Tasks: []MemberInput{member("a"), member("b", "a", "a")}})
	if err != nil || len(dag.Members[1].DependsOn) != 1 {
		t.Fatalf("dag = %+v, %v", dag, err)
	}
}

// A 1,000-node DAG (1 → 998 in parallel → 1) and a 10,000-member chain are
// accepted; the checks are linear (a chain this long would overflow a
// quadratic or deeply recursive check's budget long before a test timeout
// notices, so the size itself is the assertion).
func TestNormalizeAcceptsLargeGraphs(t *testing.T) {
	diamond := []MemberInput{member("download")}
	var mids []string
	for i := range 998 {
		id := fmt.Sprintf("p%d", i)
		mids = append(mids, id)
		diamond = append(diamond, member(id, "download"))
	}
	diamond = append(diamond, member("merge", mids...))
	def, err := Normalize(Input{Mode: "dag", Tasks: diamond})
	if err != nil || len(def.Members) != 1000 || len(def.Members[999].DependsOn) != 998 {
		t.Fatalf("diamond: %v (%d members)", err, len(def.Members))
	}
	chain := []MemberInput{member("n0")}
	for i := 1; i < MaxMembers; i++ {
		chain = append(chain, member(fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", i-1)))
	}
	if _, err := Normalize(Input{Mode: "dag", Tasks: chain}); err != nil {
		t.Fatal(err)
	}
	// Closing the chain into a ring names every member of the cycle.
	chain[0] = member("n0", fmt.Sprintf("n%d", MaxMembers-1))
	_, err = Normalize(Input{Mode: "dag", Tasks: chain})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("n0 → n%d → n%d", MaxMembers-1, MaxMembers-2)) {
		t.Fatalf("ring: %.200v", err)
	}
	if _, err := Normalize(Input{Mode: "parallel", Tasks: make([]MemberInput, MaxMembers+1)}); err == nil {
		t.Fatal("more than MaxMembers tasks accepted")
	}
}

func TestNextWake(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	base := Group{Status: StatusRunning, Counts: map[task.Status]int{}}
	tests := []struct {
		name   string
		repeat Repeat
		counts map[task.Status]int
		want   time.Time
	}{
		{"interval after the last start", Repeat{Count: 5, Parallel: 2, IntervalSec: 10, Released: 1, LastStartAt: t0},
			map[task.Status]int{task.StatusRunning: 1}, t0.Add(10 * time.Second)},
		{"a run not started yet", Repeat{Count: 5, Parallel: 2, IntervalSec: 10, Released: 1, LastStartAt: t0},
			map[task.Status]int{task.StatusAssigned: 1}, time.Time{}},
		{"slots full", Repeat{Count: 5, Parallel: 1, Released: 1}, map[task.Status]int{task.StatusRunning: 1}, time.Time{}},
		{"backoff of a failed run", Repeat{Count: 2, Parallel: 1, Released: 2, Retries: []Retry{{Run: 1, Attempt: 2, DueAt: t0.Add(30 * time.Second)}}},
			map[task.Status]int{task.StatusFailed: 1, task.StatusCompleted: 1}, t0.Add(30 * time.Second)},
		{"breaker open", Repeat{Count: 5, Parallel: 1, Released: 1, CircuitOpen: true, Retries: []Retry{{DueAt: t0}}}, nil, time.Time{}},
		{"all released", Repeat{Count: 2, Parallel: 1, Released: 2}, nil, time.Time{}},
	}
	for _, tt := range tests {
		g := base
		r := tt.repeat
		g.Repeat, g.Counts = &r, tt.counts
		if got := g.NextWake(); !got.Equal(tt.want) {
			t.Errorf("%s: NextWake = %v, want %v", tt.name, got, tt.want)
		}
	}
}
