package domain

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Limits of one group.
const (
	// MaxMembers bounds a group's members (and a repeat's count is
	// bounded separately, by MaxRepeatCount).
	MaxMembers     = 10000
	MaxRepeatCount = 100000
	MaxParallel    = 10000
	MaxRepeatSlots = 1000
	MaxSeconds     = 86400
)

// ident is the form of member, group and template ids (as task ids and
// targets: docs/api/tasks.md).
var ident = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

// Input is a group as submitted.
type Input struct {
	Name        string
	Mode        string
	Tasks       []MemberInput
	MaxParallel int
	Repeat      *RepeatInput
	// Webhook is the group's own endpoint, notified once when the group
	// ends (docs/api/webhooks.md); "" is the tenant's default.
	Webhook string
}

// MemberInput is one member as submitted. Spec.DependsOn holds member ids,
// not task ids; a template, if the member names one, is already applied.
type MemberInput struct {
	ID   string
	Spec task.SpecInput
}

// RepeatInput is a repeat as submitted; absent numbers take the defaults.
type RepeatInput struct {
	Count                                                   int
	Parallel, IntervalSec, MaxFailures, BackoffSec, Breaker *int
	Spec                                                    task.SpecInput
}

// Definition is a valid group with defaults filled: what TaskGroupCreated
// records.
type Definition struct {
	Name        string
	Mode        Mode
	MaxParallel int
	Members     []MemberDef
	Repeat      *RepeatDef
	// Webhook is the group's endpoint ("" the tenant's default).
	Webhook string
}

// MemberDef is one valid member.
type MemberDef struct {
	Key          string
	Spec         task.Spec
	DependsOn    []string // member keys
	ClusterQueue string
	// TaskID is the id of the task the member becomes, fixed when the
	// group is created for a member whose id the client did not give: its
	// id is that task id, so the task routes find it by the id the group
	// shows. "" (a member named by the client): a fresh id at release.
	TaskID string
}

// unnamedKey is the placeholder key of the member at index i whose id the
// client did not give, until Create gives it its task's id. It is not a
// valid id (ident), so no client's id can equal it.
func unnamedKey(i int) string { return fmt.Sprintf("#%d", i+1) }

// unnamed reports whether key is a placeholder of unnamedKey.
func unnamed(key string) bool { return strings.HasPrefix(key, "#") }

// withTaskIDs gives each member whose id the client did not give the id of
// its task-to-be, newID's, as its id and TaskID, and renames the
// dependencies on it. d is not changed.
func (d Definition) withTaskIDs(newID func() string) Definition {
	rename := map[string]string{}
	members := make([]MemberDef, len(d.Members))
	for i, m := range d.Members {
		if unnamed(m.Key) {
			id := newID()
			rename[m.Key] = id
			m.Key, m.TaskID = id, id
		}
		members[i] = m
	}
	if len(rename) == 0 {
		return d
	}
	for i, m := range members {
		if len(m.DependsOn) == 0 {
			continue
		}
		deps := make([]string, len(m.DependsOn))
		for j, dep := range m.DependsOn {
			deps[j] = cmp.Or(rename[dep], dep)
		}
		members[i].DependsOn = deps
	}
	d.Members = members
	return d
}

// RepeatDef is a valid repeat.
type RepeatDef struct {
	Count, Parallel, IntervalSec, MaxFailures, BackoffSec, Threshold int
	Spec                                                             task.Spec
	ClusterQueue                                                     string
}

func invalid(field, format string, args ...any) error {
	return &task.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// within renames the field of a task spec's InvalidError to sit under
// prefix (tasks[2].command, repeat.template.timeout).
func within(prefix string, err error) error {
	var ie *task.InvalidError
	if errors.As(err, &ie) {
		return &task.InvalidError{Field: prefix + "." + ie.Field, Reason: ie.Reason}
	}
	return err
}

// Normalize validates a submitted group and fills its defaults. Every
// error is a *task.InvalidError naming the field and the offending ids
// (duplicates, unknown or self dependencies, the path of a cycle); the
// checks are linear in the number of members and dependencies.
func Normalize(in Input) (Definition, error) {
	hook := strings.TrimSpace(in.Webhook)
	if err := task.CheckWebhook(hook); err != nil {
		return Definition{}, err
	}
	def, err := normalize(in)
	def.Webhook = hook
	return def, err
}

func normalize(in Input) (Definition, error) {
	mode := Mode(in.Mode)
	switch {
	case in.Repeat != nil && (mode == "" || mode == ModeRepeat):
		if len(in.Tasks) > 0 {
			return Definition{}, invalid("tasks", "a repeat runs its template; it takes no tasks")
		}
		return normalizeRepeat(in)
	case in.Repeat != nil:
		return Definition{}, invalid("repeat", "is only for mode repeat, not %q", in.Mode)
	case mode == ModeRepeat:
		return Definition{}, invalid("repeat", "is required for mode repeat")
	case mode == "":
		mode = ModeSerial
	case mode != ModeSerial && mode != ModeParallel && mode != ModeDAG:
		return Definition{}, invalid("mode", "must be serial, parallel, dag or repeat, not %q", in.Mode)
	}
	def := Definition{Name: strings.TrimSpace(in.Name), Mode: mode, MaxParallel: in.MaxParallel}
	if err := checkName(&def.Name, string(mode)+" group"); err != nil {
		return Definition{}, err
	}
	switch {
	case len(in.Tasks) == 0:
		return Definition{}, invalid("tasks", "a %s group needs at least one task", mode)
	case len(in.Tasks) > MaxMembers:
		return Definition{}, invalid("tasks", "has %d tasks; at most %d", len(in.Tasks), MaxMembers)
	case in.MaxParallel < 0 || in.MaxParallel > MaxParallel:
		return Definition{}, invalid("max_parallel", "must be 0 (no limit) to %d", MaxParallel)
	case in.MaxParallel > 0 && mode != ModeParallel:
		return Definition{}, invalid("max_parallel", "is only for mode parallel")
	}
	def.Members = make([]MemberDef, len(in.Tasks))
	index := make(map[string]int, len(in.Tasks))
	for i, m := range in.Tasks {
		key, err := memberKey(mode, i, m.ID)
		if err != nil {
			return Definition{}, err
		}
		if j, dup := index[key]; dup {
			return Definition{}, invalid(fmt.Sprintf("tasks[%d].id", i), "duplicate id %q (also tasks[%d])", key, j)
		}
		index[key] = i
		spec, err := memberSpec(fmt.Sprintf("tasks[%d]", i), m.Spec)
		if err != nil {
			return Definition{}, err
		}
		def.Members[i] = MemberDef{Key: key, Spec: spec}
	}
	for i, m := range in.Tasks {
		deps, err := dependencies(mode, i, m.Spec.DependsOn, index)
		if err != nil {
			return Definition{}, err
		}
		def.Members[i].DependsOn = deps
	}
	if mode == ModeSerial {
		for i := 1; i < len(def.Members); i++ {
			def.Members[i].DependsOn = []string{def.Members[i-1].Key}
		}
	}
	if mode == ModeDAG {
		if err := checkAcyclic(def.Members); err != nil {
			return Definition{}, err
		}
	}
	return def, nil
}

func checkName(name *string, fallback string) error {
	switch {
	case *name == "":
		*name = fallback
	case utf8.RuneCountInString(*name) > 255:
		return invalid("name", "is longer than 255 characters")
	}
	return nil
}

// memberKey is the member's id: the one given, or outside dag a
// placeholder that Create replaces with the id of the member's task.
func memberKey(mode Mode, i int, id string) (string, error) {
	switch {
	case id == "" && mode == ModeDAG:
		return "", invalid(fmt.Sprintf("tasks[%d].id", i), "is required in dag mode (depends_on names these ids)")
	case id == "":
		return unnamedKey(i), nil
	case !ident.MatchString(id):
		return "", invalid(fmt.Sprintf("tasks[%d].id", i), "%q is not a valid id (letters, digits, . _ : / -; at most 128)", id)
	}
	return id, nil
}

// dependencies checks one member's depends_on: dag only, known ids, not
// itself. Repeated ids count once.
func dependencies(mode Mode, i int, deps []string, index map[string]int) ([]string, error) {
	if len(deps) == 0 {
		return nil, nil
	}
	field := fmt.Sprintf("tasks[%d].depends_on", i)
	if mode != ModeDAG {
		return nil, invalid(field, "is only for dag mode (a %s group orders its tasks itself)", mode)
	}
	out := make([]string, 0, len(deps))
	seen := make(map[string]bool, len(deps))
	for _, d := range deps {
		j, ok := index[d]
		switch {
		case !ok:
			return nil, invalid(field, "no task in the group has id %q", d)
		case j == i:
			return nil, invalid(field, "task %q depends on itself", d)
		case seen[d]:
			continue
		}
		seen[d] = true
		out = append(out, d)
	}
	return out, nil
}

// dfsFrame is a member on the search path and the next of its
// dependencies to follow.
type dfsFrame struct{ node, next int }

// checkAcyclic finds a cycle in the dependencies, if any, by a depth-first
// search (iterative: a long chain needs no deep recursion), and names its
// path. Linear in members plus dependencies.
func checkAcyclic(members []MemberDef) error {
	index := make(map[string]int, len(members))
	for i, m := range members {
		index[m.Key] = i
	}
	const (
		unseen = iota
		onPath
		done
	)
	color := make([]uint8, len(members))
	for root := range members {
		if color[root] != unseen {
			continue
		}
		stack := []dfsFrame{{node: root}}
		color[root] = onPath
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := members[top.node].DependsOn
			if top.next == len(deps) {
				color[top.node] = done
				stack = stack[:len(stack)-1]
				continue
			}
			d := index[deps[top.next]]
			top.next++
			switch color[d] {
			case unseen:
				color[d] = onPath
				stack = append(stack, dfsFrame{node: d})
			case onPath:
				return invalid("depends_on", "the dependencies form a cycle: %s", cyclePath(members, stack, d))
			}
		}
	}
	return nil
}

// cyclePath spells the cycle that closes at member d, which is on the
// search path: d → … → the path's end → d (each member waits for the
// next).
func cyclePath(members []MemberDef, stack []dfsFrame, d int) string {
	var path []string
	for i := len(stack) - 1; i >= 0; i-- {
		if stack[i].node == d {
			for _, f := range stack[i:] {
				path = append(path, members[f.node].Key)
			}
			break
		}
	}
	return strings.Join(append(path, members[d].Key), " → ")
}

// memberSpec normalizes a member's task: one task, placed by the group.
func memberSpec(field string, in task.SpecInput) (task.Spec, error) {
	switch {
	case len(in.TargetMachines) > 0 || len(in.TargetIPs) > 0:
		return task.Spec{}, invalid(field+".targets", "a member is one task; targets are not allowed")
	case in.Repeat > 1:
		return task.Spec{}, invalid(field+".repeat_count", "a member is one task; use a repeat group")
	case in.Mode != "" && in.Mode != task.ModeSingle:
		return task.Spec{}, invalid(field+".distribution.mode", "a member is one task; only single is allowed")
	case in.GroupID != "":
		return task.Spec{}, invalid(field+".group_id", "is set by the group")
	case in.Type == task.TypeVideo || in.Video != nil:
		return task.Spec{}, invalid(field+".type", "video tasks are made by the video API")
	}
	in.DependsOn = nil // member ids, resolved to task ids at release
	spec, err := task.NormalizeSpec(in)
	if err != nil {
		return task.Spec{}, within(field, err)
	}
	return spec, nil
}

func normalizeRepeat(in Input) (Definition, error) {
	r := in.Repeat
	def := Definition{Name: strings.TrimSpace(in.Name), Mode: ModeRepeat}
	num := func(p *int, d int) int {
		if p == nil {
			return d
		}
		return *p
	}
	rd := &RepeatDef{Count: r.Count, Parallel: num(r.Parallel, 1), IntervalSec: num(r.IntervalSec, 0),
		MaxFailures: num(r.MaxFailures, 0), BackoffSec: num(r.BackoffSec, 0), Threshold: num(r.Breaker, 0)}
	switch {
	case in.MaxParallel != 0:
		return Definition{}, invalid("max_parallel", "is only for mode parallel; a repeat has repeat.parallel")
	case rd.Count < 1 || rd.Count > MaxRepeatCount:
		return Definition{}, invalid("repeat.count", "must be 1 to %d", MaxRepeatCount)
	case rd.Parallel < 1 || rd.Parallel > MaxRepeatSlots:
		return Definition{}, invalid("repeat.parallel", "must be 1 to %d", MaxRepeatSlots)
	case rd.IntervalSec < 0 || rd.IntervalSec > MaxSeconds:
		return Definition{}, invalid("repeat.interval_sec", "must be 0 to %d", MaxSeconds)
	case rd.MaxFailures < 0 || rd.MaxFailures > MaxRepeatCount:
		return Definition{}, invalid("repeat.max_failures", "must be 0 (no limit) to %d", MaxRepeatCount)
	case rd.BackoffSec < 0 || rd.BackoffSec > MaxSeconds:
		return Definition{}, invalid("repeat.backoff_sec", "must be 0 to %d", MaxSeconds)
	case rd.Threshold < 0 || rd.Threshold > MaxRepeatCount:
		return Definition{}, invalid("repeat.circuit_breaker_threshold", "must be 0 (no breaker) to %d", MaxRepeatCount)
	case len(r.Spec.DependsOn) > 0:
		return Definition{}, invalid("repeat.template.depends_on", "runs of a repeat depend on nothing")
	}
	spec := r.Spec
	if spec.MaxRetries == nil {
		// The repeat's own policy (backoff_sec, max_failures, the breaker)
		// handles failed runs; a run retrying by itself would hide them.
		zero := 0
		spec.MaxRetries = &zero
	}
	var err error
	if rd.Spec, err = memberSpec("repeat.template", spec); err != nil {
		return Definition{}, err
	}
	if err := checkName(&def.Name, rd.Spec.Name); err != nil {
		return Definition{}, err
	}
	def.Repeat = rd
	return def, nil
}
