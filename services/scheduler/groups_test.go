package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

func (e *env) groups() taskv1.TaskGroupServiceClient { return taskv1.NewTaskGroupServiceClient(e.conn) }
func (e *env) templates() taskv1.TemplateServiceClient {
	return taskv1.NewTemplateServiceClient(e.conn)
}

func operator() context.Context {
	return as(authn.Principal{Kind: authn.KindAdmin, Subject: "admin:ops", RemoteIP: "10.0.0.9"})
}

func node(id, command string, deps ...string) *taskv1.TaskGroupTask {
	return &taskv1.TaskGroupTask{Id: id, Name: id, Command: command, DependsOn: deps}
}

// etlDAG is the documented DAG: download → process1 ∥ process2 → merge.
func etlDAG() *taskv1.CreateTaskGroupRequest {
	return &taskv1.CreateTaskGroupRequest{Name: "etl", Mode: "dag", Start: proto.Bool(true), Tasks: []*taskv1.TaskGroupTask{
		node("download", "wget"), node("process1", "python", "download"), node("process2", "python", "download"),
		node("merge", "python", "process1", "process2")}}
}

func (e *env) group(ctx context.Context, id string) *taskv1.TaskGroup {
	e.t.Helper()
	r, err := e.groups().GetTaskGroup(ctx, &taskv1.GetTaskGroupRequest{Id: id})
	if err != nil {
		e.t.Fatalf("get group: %v", err)
	}
	return r.GetGroup()
}

func (e *env) complete(t *taskv1.Task, exit int32) {
	e.t.Helper()
	if _, err := e.leases().CompleteTask(agent("agent-1"), &taskv1.CompleteTaskRequest{TaskId: t.GetId(), AgentId: "agent-1",
		AttemptId: t.GetAttemptId(), ExitCode: exit}); err != nil {
		e.t.Fatal(err)
	}
}

func names(ts []*taskv1.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.GetName())
	}
	slices.Sort(out)
	return out
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// The documented DAG through the lease API: download alone first, then both
// branches at once, merge only after both; the group completes, is
// audited, and its rows are rebuilt from its events.
func TestDAGGroupThroughLeases(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	created, err := e.groups().CreateTaskGroup(ctx, etlDAG())
	if err != nil {
		t.Fatal(err)
	}
	g := created.GetGroup()
	if g.GetStatus() != "running" || g.GetMode() != "dag" || len(g.GetTasks()) != 4 || g.GetCounts().GetPending() != 4 ||
		g.GetCreatedBy() == "" {
		t.Fatalf("created %v", g)
	}
	got := e.claim("agent-1", "m1", 10)
	if slices.Compare(names(got), []string{"download"}) != 0 {
		t.Fatalf("first claim %v", names(got))
	}
	e.complete(got[0], 0)
	got = e.claim("agent-1", "m1", 10)
	if slices.Compare(names(got), []string{"process1", "process2"}) != 0 {
		t.Fatalf("second claim %v: both branches must be claimable together", names(got))
	}
	e.complete(got[0], 0)
	if more := e.claim("agent-1", "m1", 10); len(more) != 0 {
		t.Fatalf("merge claimed before both branches completed: %v", names(more))
	}
	e.complete(got[1], 0)
	got = e.claim("agent-1", "m1", 10)
	if slices.Compare(names(got), []string{"merge"}) != 0 {
		t.Fatalf("third claim %v", names(got))
	}
	e.complete(got[0], 0)
	eventually(t, 10*time.Second, "the group to complete", func() bool {
		return e.group(ctx, g.GetId()).GetStatus() == "completed"
	})
	done := e.group(ctx, g.GetId())
	if done.GetCounts().GetCompleted() != 4 || done.GetEndedAt() == nil || done.GetTasks()[3].GetStatus() != "completed" ||
		done.GetTasks()[3].GetTaskId() == "" || slices.Compare(done.GetTasks()[3].GetDependsOn(), []string{"process1", "process2"}) != 0 {
		t.Fatalf("completed group %v", done)
	}
	// The member tasks are ordinary tasks of the group.
	if task, err := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: done.GetTasks()[3].GetTaskId()}); err != nil ||
		task.GetTask().GetGroupId() != g.GetId() || len(task.GetTask().GetDependsOn()) != 2 {
		t.Fatalf("merge task %v, %v", task, err)
	}
	// The events the audit log is built from (the consumers service's).
	if n := e.count(`SELECT count(*) FROM events WHERE aggregate_id = $1
			AND event_type IN ('TaskGroupCreated', 'TaskGroupStarted', 'TaskGroupCompleted')`, g.GetId()); n != 3 {
		t.Fatalf("%d group lifecycle events, want 3", n)
	}

	rep, err := scheduler.RebuildInlineProjection(context.Background(), e.pool, false)
	if err != nil || rep.Groups != 1 || rep.Tasks != 4 || len(rep.Differences) != 0 {
		t.Fatalf("rebuild compare = %+v, %v", rep, err)
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE task_group_members SET doc = jsonb_set(doc::jsonb, '{status}', '"failed"')::json
		WHERE group_id = $1 AND key = 'merge'`, g.GetId()); err != nil {
		t.Fatal(err)
	}
	rep, err = scheduler.RebuildInlineProjection(context.Background(), e.pool, true)
	if err != nil || !slices.Equal(rep.Differences, []string{"task_group/" + g.GetId()}) {
		t.Fatalf("tampered compare = %+v, %v", rep, err)
	}
	if rep, err = scheduler.RebuildInlineProjection(context.Background(), e.pool, false); err != nil || len(rep.Differences) != 0 {
		t.Fatalf("after rebuild = %+v, %v", rep, err)
	}
	if e.group(ctx, g.GetId()).GetTasks()[3].GetStatus() != "completed" {
		t.Fatal("the rebuild did not restore the member")
	}
	for _, spec := range scheduler.ReplaySpecs(e.broker.Config()) {
		if ok, err := replay(spec, e); err != nil || !ok {
			t.Fatalf("replay %s equal=%v err=%v", spec.Name, ok, err)
		}
	}
}

// RetryTask of a failed DAG member while its group runs: the group follows
// the member again and brings back the dependent its failure cancelled;
// the group completes, its rows rebuild from its events, and a member of
// the ended group is not run again (30002, nothing changes).
func TestRetriedDAGMemberThroughLeases(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	a := node("a", "step-a")
	a.MaxRetries = i32(0)
	created, err := e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Mode: "dag", Start: proto.Bool(true),
		Tasks: []*taskv1.TaskGroupTask{a, node("b", "step-b", "a"), node("x", "step-x")}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetGroup().GetId()
	member := func(g *taskv1.TaskGroup, key string) *taskv1.TaskGroupMember {
		for _, m := range g.GetTasks() {
			if m.GetId() == key {
				return m
			}
		}
		t.Fatalf("no member %s in %v", key, g)
		return nil
	}
	got := e.claim("agent-1", "m1", 10)
	if slices.Compare(names(got), []string{"a", "x"}) != 0 {
		t.Fatalf("first claim %v", names(got))
	}
	x := got[1]
	e.complete(got[0], 1)
	eventually(t, 10*time.Second, "b cancelled for a", func() bool {
		return member(e.group(ctx, id), "b").GetStatus() == "cancelled"
	})
	retried, err := e.tasks().RetryTask(ctx, &taskv1.RetryTaskRequest{Id: member(e.group(ctx, id), "a").GetTaskId()})
	if err != nil || retried.GetTask().GetStatus() != "pending" {
		t.Fatalf("retry a: %v, %v", retried, err)
	}
	g := e.group(ctx, id)
	if member(g, "a").GetStatus() != "pending" || member(g, "b").GetStatus() != "pending" || g.GetCounts().GetPending() != 2 ||
		g.GetCounts().GetFailed() != 0 || g.GetCounts().GetCancelled() != 0 || g.GetStatus() != "running" {
		t.Fatalf("after the retry: %v", g)
	}
	got = e.claim("agent-1", "m1", 10)
	if slices.Compare(names(got), []string{"a"}) != 0 {
		t.Fatalf("claim after the retry %v", names(got))
	}
	e.complete(got[0], 0)
	got = e.claim("agent-1", "m1", 10)
	if slices.Compare(names(got), []string{"b"}) != 0 {
		t.Fatalf("claim after a completed %v", names(got))
	}
	e.complete(got[0], 0)
	e.complete(x, 0)
	eventually(t, 10*time.Second, "the group to complete", func() bool { return e.group(ctx, id).GetStatus() == "completed" })
	done := e.group(ctx, id)
	if done.GetCounts().GetCompleted() != 3 || done.GetError() != "" || member(done, "a").GetStatus() != "completed" {
		t.Fatalf("completed group %v", done)
	}
	_, err = e.tasks().RetryTask(ctx, &taskv1.RetryTaskRequest{Id: member(done, "a").GetTaskId()})
	if status.Code(err) != codes.FailedPrecondition || code(err) != "30002" || !strings.Contains(err.Error(), "has ended (completed)") {
		t.Fatalf("retry in the ended group: %v", err)
	}
	if after := e.group(ctx, id); after.GetVersion() != done.GetVersion() {
		t.Fatalf("a refused retry changed the group: version %d, was %d", after.GetVersion(), done.GetVersion())
	}
	rep, err := scheduler.RebuildInlineProjection(context.Background(), e.pool, false)
	if err != nil || len(rep.Differences) != 0 {
		t.Fatalf("rebuild compare = %+v, %v", rep, err)
	}
}

// A serial group orders its members by their dependencies: an update that
// would clear a member's is refused (30005) and the members still run one
// after another; a task that merely carries a group_id of its client's
// may have its dependencies cleared.
func TestAMembersDependenciesAreItsGroups(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	created, err := e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Mode: "serial", Start: proto.Bool(true),
		Tasks: []*taskv1.TaskGroupTask{node("a", "step-a"), node("b", "step-b")}})
	if err != nil {
		t.Fatal(err)
	}
	second := created.GetGroup().GetTasks()[1].GetTaskId()
	clear := &fieldmaskpb.FieldMask{Paths: []string{"depends_on"}}
	_, err = e.tasks().UpdateTask(ctx, &taskv1.UpdateTaskRequest{Id: second, Spec: &taskv1.TaskSpec{}, UpdateMask: clear})
	if status.Code(err) != codes.InvalidArgument || code(err) != "30005" || !strings.Contains(err.Error(), "its dependencies are the group's") {
		t.Fatalf("clearing a member's dependencies: %v", err)
	}
	if got := e.claim("agent-1", "m1", 10); slices.Compare(names(got), []string{"a"}) != 0 {
		t.Fatalf("claim after the refused update: %v, want a alone", names(got))
	}

	dep, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "dep", Command: "true", MachineId: "elsewhere"}})
	if err != nil {
		t.Fatal(err)
	}
	own, err := e.tasks().CreateTask(ctx, &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "own", Command: "true",
		GroupId: created.GetGroup().GetId(), DependsOn: []string{dep.GetTask().GetId()}}})
	if err != nil {
		t.Fatal(err)
	}
	up, err := e.tasks().UpdateTask(ctx, &taskv1.UpdateTaskRequest{Id: own.GetTask().GetId(), Spec: &taskv1.TaskSpec{}, UpdateMask: clear})
	if err != nil || len(up.GetTask().GetDependsOn()) != 0 {
		t.Fatalf("clearing the dependencies of a task given the group's id: %v, %v", up, err)
	}
}

// A cycle, an unknown dependency and a duplicate id are refused with
// 30005 naming the ids, and nothing is stored.
func TestInvalidGroupsStoreNothing(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	rows := func() [3]int {
		return [3]int{e.count(`SELECT count(*) FROM events`), e.count(`SELECT count(*) FROM tasks`), e.count(`SELECT count(*) FROM task_groups`)}
	}
	before := rows()
	for _, tt := range []struct {
		name  string
		tasks []*taskv1.TaskGroupTask
		text  string
	}{
		{"cycle", []*taskv1.TaskGroupTask{node("a", "x", "c"), node("b", "x", "a"), node("c", "x", "b")}, "a → c → b → a"},
		{"unknown dependency", []*taskv1.TaskGroupTask{node("a", "x"), node("b", "x", "nope")}, `"nope"`},
		{"duplicate id", []*taskv1.TaskGroupTask{node("a", "x"), node("a", "x")}, `duplicate id "a"`},
		{"self dependency", []*taskv1.TaskGroupTask{node("a", "x", "a")}, `"a" depends on itself`},
	} {
		_, err := e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Mode: "dag", Tasks: tt.tasks})
		if status.Code(err) != codes.InvalidArgument || code(err) != "30005" || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	if after := rows(); after != before {
		t.Fatalf("rows (events, tasks, groups) before %v, after %v", before, after)
	}
}

// A create repeated with its request_id answers the first create's
// group; once that group is deleted, the repeat is not found, like every
// read of it, and creates nothing.
func TestARepeatedGroupCreateAfterItsDeleteIsNotFound(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	req := &taskv1.CreateTaskGroupRequest{Name: "once", RequestId: "grp-1", Tasks: []*taskv1.TaskGroupTask{node("a", "true")}}
	first, err := e.groups().CreateTaskGroup(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.groups().CreateTaskGroup(ctx, req)
	if err != nil || again.GetGroup().GetId() != first.GetGroup().GetId() {
		t.Fatalf("repeat = %v, %v; want group %s", again, err, first.GetGroup().GetId())
	}
	if _, err := e.groups().DeleteTaskGroup(ctx, &taskv1.DeleteTaskGroupRequest{Id: first.GetGroup().GetId()}); err != nil {
		t.Fatal(err)
	}
	groups := e.count(`SELECT count(*) FROM task_groups`)
	if _, err := e.groups().CreateTaskGroup(ctx, req); status.Code(err) != codes.NotFound || code(err) != "30004" {
		t.Fatalf("repeat after the delete = %v, want NotFound 30004", err)
	}
	if n := e.count(`SELECT count(*) FROM task_groups`); n != groups {
		t.Fatalf("task_groups %d after the repeat, %d before", n, groups)
	}
}

func str(s string) *structpb.Value { return structpb.NewStringValue(s) }

// A repeat's breaker opens after threshold failures in a row; a tenant
// cannot reset it, an operator can (with a reason), and the reset is
// audited with the operator, the reason and the time.
func TestRepeatBreakerAndOperatorReset(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	created, err := e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Start: proto.Bool(true), Repeat: &taskv1.RepeatPolicy{Count: 5,
		CircuitBreakerThreshold: i32(2), Template: &taskv1.TaskSpec{Name: "flaky", Command: "false"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetGroup().GetId()
	// The repeat shows the task its runs execute, as its policy gave it,
	// on creation and when read.
	for _, g := range []*taskv1.TaskGroup{created.GetGroup(), e.group(ctx, id)} {
		tpl := g.GetRepeat().GetTemplate()
		if tpl.GetName() != "flaky" || tpl.GetCommand() != "false" || tpl.GetMaxRetries() != 0 || tpl.GetPriority() != 5 {
			t.Fatalf("repeat.template = %v", tpl)
		}
	}
	for i := 0; i < 2; i++ {
		var got []*taskv1.Task
		eventually(t, 5*time.Second, fmt.Sprint("run ", i+1), func() bool { got = e.claim("agent-1", "m1", 10); return len(got) > 0 })
		if len(got) != 1 || got[0].GetMaxRetries() != 0 {
			t.Fatalf("run %d: %v", i+1, got)
		}
		e.complete(got[0], 1)
	}
	eventually(t, 5*time.Second, "the breaker to open", func() bool { return e.group(ctx, id).GetRepeat().GetCircuitOpen() })
	if got := e.claim("agent-1", "m1", 10); len(got) != 0 {
		t.Fatalf("a run started with the breaker open: %v", got)
	}
	_, err = e.groups().ResetTaskGroupRepeat(ctx, &taskv1.ResetTaskGroupRepeatRequest{Id: id, Reason: "fixed"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("tenant reset: %v", err)
	}
	reset, err := e.groups().ResetTaskGroupRepeat(operator(), &taskv1.ResetTaskGroupRepeatRequest{Id: id, Reason: "rig fixed"})
	if err != nil {
		t.Fatal(err)
	}
	if r := reset.GetGroup().GetRepeat(); r.GetCircuitOpen() || r.GetResetBy() != "admin:ops" || r.GetResetReason() != "rig fixed" || r.GetResetAt() == nil {
		t.Fatalf("after reset %v", r)
	}
	if got := e.claim("agent-1", "m1", 10); len(got) != 1 {
		t.Fatalf("no run after the reset: %v", got)
	}
	// The events the audit log is built from (the consumers service's).
	if e.count(`SELECT count(*) FROM events WHERE event_type = 'TaskGroupRepeatReset' AND aggregate_id = $1`, id) != 1 {
		t.Fatal("no event for the reset")
	}
	if e.count(`SELECT count(*) FROM events WHERE event_type = 'TaskGroupCircuitOpened' AND aggregate_id = $1`, id) != 1 {
		t.Fatal("no event for the breaker opening")
	}
}

// Templates over gRPC: create, read, run with variables (each value one
// argument), a duplicate id, a bad variable (nothing created), another
// tenant (not found everywhere), update and delete (audited).
func TestTemplates(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	tpl := &taskv1.TaskTemplate{Id: "echo", Name: "echo", Command: "printf", Args: []string{"<%s>", "{{msg}}", "--n={{n}}"},
		Variables: []*taskv1.TemplateVar{{Name: "msg", Type: "string", Required: true}, {Name: "n", Type: "int", Default: "1"}}}
	if _, err := e.templates().CreateTemplate(ctx, &taskv1.CreateTemplateRequest{Template: tpl}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.templates().CreateTemplate(ctx, &taskv1.CreateTemplateRequest{Template: tpl}); status.Code(err) != codes.AlreadyExists || code(err) != "30006" {
		t.Fatalf("duplicate: %v", err)
	}
	tasksBefore := e.count(`SELECT count(*) FROM tasks`)
	_, err := e.templates().RunTemplate(ctx, &taskv1.RunTemplateRequest{Id: "echo", Variables: map[string]*structpb.Value{
		"msg": str("x"), "n": str("many")}})
	if code(err) != "30005" || !strings.Contains(err.Error(), "variables.n") {
		t.Fatalf("bad variable: %v", err)
	}
	if e.count(`SELECT count(*) FROM tasks`) != tasksBefore {
		t.Fatal("a refused run created a task")
	}
	run, err := e.templates().RunTemplate(ctx, &taskv1.RunTemplateRequest{Id: "echo", Priority: i32(2),
		Variables: map[string]*structpb.Value{"msg": str(`"; rm -rf / #`), "n": structpb.NewNumberValue(3)}})
	if err != nil {
		t.Fatal(err)
	}
	if a := run.GetTask().GetArgs(); !slices.Equal(a, []string{"<%s>", `"; rm -rf / #`, "--n=3"}) || run.GetTask().GetPriority() != 2 {
		t.Fatalf("run task %v", run.GetTask())
	}
	other := user("tenant-b")
	for name, call := range map[string]func() error{
		"get": func() error {
			_, err := e.templates().GetTemplate(other, &taskv1.GetTemplateRequest{Id: "echo"})
			return err
		},
		"update": func() error {
			_, err := e.templates().UpdateTemplate(other, &taskv1.UpdateTemplateRequest{Id: "echo", Template: tpl})
			return err
		},
		"delete": func() error {
			_, err := e.templates().DeleteTemplate(other, &taskv1.DeleteTemplateRequest{Id: "echo"})
			return err
		},
		"run": func() error {
			_, err := e.templates().RunTemplate(other, &taskv1.RunTemplateRequest{Id: "echo", Variables: map[string]*structpb.Value{"msg": str("x")}})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.NotFound || code(err) != "30004" {
			t.Errorf("another tenant's %s: %v", name, err)
		}
	}
	if l, err := e.templates().ListTemplates(other, &taskv1.ListTemplatesRequest{}); err != nil || len(l.GetTemplates()) != 0 {
		t.Fatalf("another tenant's list: %v, %v", l, err)
	}
	tpl.Description = "v2"
	up, err := e.templates().UpdateTemplate(ctx, &taskv1.UpdateTemplateRequest{Id: "echo", Template: tpl})
	if err != nil || up.GetTemplate().GetDescription() != "v2" || up.GetTemplate().GetCreatedBy() != "key-tenant-a" {
		t.Fatalf("update: %v, %v", up, err)
	}
	// With a mask, only the fields it names change; a path of no field is
	// 30005 naming update_mask.
	up, err = e.templates().UpdateTemplate(ctx, &taskv1.UpdateTemplateRequest{Id: "echo",
		Template: &taskv1.TaskTemplate{Description: "v3"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}}})
	if err != nil || up.GetTemplate().GetDescription() != "v3" || up.GetTemplate().GetName() != "echo" ||
		!slices.Equal(up.GetTemplate().GetArgs(), tpl.GetArgs()) || len(up.GetTemplate().GetVariables()) != 2 {
		t.Fatalf("update of the description: %v, %v", up, err)
	}
	_, err = e.templates().UpdateTemplate(ctx, &taskv1.UpdateTemplateRequest{Id: "echo",
		Template: &taskv1.TaskTemplate{Description: "v4"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"descripton"}}})
	if code(err) != "30005" || !strings.Contains(err.Error(), "update_mask") {
		t.Fatalf("a mask path of no field: %v", err)
	}
	if _, err := e.templates().DeleteTemplate(ctx, &taskv1.DeleteTemplateRequest{Id: "echo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.templates().GetTemplate(ctx, &taskv1.GetTemplateRequest{Id: "echo"}); code(err) != "30004" {
		t.Fatalf("get after delete: %v", err)
	}
	if n := e.count(`SELECT count(*) FROM events WHERE aggregate_id = 'template/tenant-a/echo'
			AND event_type IN ('TemplateCreated', 'TemplateUpdated', 'TemplateDeleted')`); n != 4 {
		t.Fatalf("%d template events, want 4", n)
	}
	rep, err := scheduler.RebuildInlineProjection(context.Background(), e.pool, false)
	if err != nil || rep.Templates != 1 || len(rep.Differences) != 0 {
		t.Fatalf("rebuild = %+v, %v", rep, err)
	}
}

// A member asks for checkpointing and output files as a task does, itself
// or over its template's; a member that leaves them out keeps the
// template's.
func TestGroupMembersCarryCheckpointsAndArtifacts(t *testing.T) {
	e := newEnv(t)
	ctx := user("tenant-a")
	tpl, err := e.templates().CreateTemplate(ctx, &taskv1.CreateTemplateRequest{Template: &taskv1.TaskTemplate{Id: "trainer",
		Name: "trainer", Command: "python", Args: []string{"train.py"}, Checkpoint: &taskv1.CheckpointSpec{Enabled: true},
		Artifacts: []string{"out/*.pt"}}})
	if err != nil {
		t.Fatal(err)
	}
	own := node("own", "python")
	own.Checkpoint, own.Artifacts = &taskv1.CheckpointSpec{Enabled: true}, []string{"model/*.onnx"}
	fromTemplate := &taskv1.TaskGroupTask{Id: "from-template", TemplateId: tpl.GetTemplate().GetId()}
	overridden := &taskv1.TaskGroupTask{Id: "overridden", TemplateId: tpl.GetTemplate().GetId(),
		Checkpoint: &taskv1.CheckpointSpec{Enabled: false}, Artifacts: []string{"logs/*"}}
	created, err := e.groups().CreateTaskGroup(ctx, &taskv1.CreateTaskGroupRequest{Name: "train", Mode: "parallel", Start: proto.Bool(true),
		Tasks: []*taskv1.TaskGroupTask{own, fromTemplate, overridden, node("plain", "true")}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		checkpoint bool
		artifacts  string
	}{"own": {true, "model/*.onnx"}, "from-template": {true, "out/*.pt"}, "overridden": {false, "logs/*"}, "plain": {false, ""}}
	for _, m := range created.GetGroup().GetTasks() {
		task, err := e.tasks().GetTask(ctx, &taskv1.GetTaskRequest{Id: m.GetTaskId()})
		if err != nil {
			t.Fatal(err)
		}
		got := task.GetTask()
		w := want[m.GetId()]
		if got.GetCheckpoint().GetEnabled() != w.checkpoint || strings.Join(got.GetArtifacts(), ",") != w.artifacts {
			t.Errorf("member %s: checkpoint %v, artifacts %v; want %v, %q", m.GetId(), got.GetCheckpoint().GetEnabled(),
				got.GetArtifacts(), w.checkpoint, w.artifacts)
		}
	}
}
