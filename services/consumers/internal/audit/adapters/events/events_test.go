package events

import (
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

var at = time.Date(2026, 11, 22, 12, 0, 0, 5, time.UTC)

func taskEvent(e *taskv1.TaskEvent) *taskv1.TaskEvent {
	e.EventId, e.AggregateId, e.Version, e.TenantId, e.Actor, e.ActorIp = "ev-1", "task-1", 3, "acme", "key-1", "203.0.113.9"
	e.OccurredAt = timestamppb.New(at)
	return e
}

func TestTaskEntry(t *testing.T) {
	code := int32(3)
	tests := []struct {
		ev      *taskv1.TaskEvent
		action  string
		machine string
		details string
	}{
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Submitted{Submitted: &taskv1.TaskSubmitted{
			Spec: &taskv1.TaskSpec{Name: "x\x00", Type: "shell", Priority: &code}, ClusterQueue: "cq"}}},
			"task.created", "", "{\"name\":\"x\uFFFD\",\"priority\":3,\"queue\":\"cq\",\"type\":\"shell\"}"},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Leased{Leased: &taskv1.TaskLeased{AttemptId: "a", AgentId: "ag", MachineId: "m-1"}}},
			"task.assigned", "m-1", `{"agent_id":"ag","attempt_id":"a"}`},
		// The changes of an attempt name the machine it ran on.
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Started{Started: &taskv1.TaskStarted{AttemptId: "a", MachineId: "m-1"}}},
			"task.started", "m-1", `{"attempt_id":"a"}`},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Succeeded{Succeeded: &taskv1.TaskSucceeded{AttemptId: "a", MachineId: "m-1"}}},
			"task.completed", "m-1", `{"exit_code":0}`},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Preempted{Preempted: &taskv1.TaskPreempted{AttemptId: "a", MachineId: "m-1", PreemptedBy: "task-2", Reason: "priority"}}},
			"task.preempted", "m-1", `{"preempted_by":"task-2","reason":"priority"}`},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{Error: "boom", Reason: "exit_code", ExitCode: &code, RetryFollows: true, MachineId: "m-1"}}},
			"task.failed", "m-1", `{"error":"boom","exit_code":3,"reason":"exit_code","retry_follows":true}`},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Failed{Failed: &taskv1.TaskFailed{Error: "spawn"}}},
			"task.failed", "", `{"error":"spawn","reason":"","retry_follows":false}`},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Requeued{Requeued: &taskv1.TaskRequeued{FromStatus: "preempted"}}},
			"task.requeued", "", `{"from":"preempted","reason":""}`},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Canceled{Canceled: &taskv1.TaskCanceled{Reason: "not needed"}}},
			"task.cancelled", "", `{"reason":"not needed"}`},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Deleted{Deleted: &taskv1.TaskDeleted{}}}, "task.deleted", "", `{}`},
		{&taskv1.TaskEvent{Event: &taskv1.TaskEvent_Checkpointed{Checkpointed: &taskv1.TaskCheckpointed{AttemptId: "a", Key: "checkpoints/acme/task-1/a.tar.gz", SizeBytes: 7}}},
			"task.checkpointed", "", `{"attempt_id":"a","checkpoint":"checkpoints/acme/task-1/a.tar.gz","size_bytes":7}`},
	}
	for _, tt := range tests {
		e, ok, err := TaskEntry(taskEvent(tt.ev))
		want := domain.Entry{ID: "ev-1", At: at, Version: 3, TenantID: "acme", Action: tt.action, Resource: "task", ResourceID: "task-1",
			UserID: "key-1", MachineID: tt.machine, Details: tt.details, IP: "203.0.113.9"}
		if err != nil || !ok || e != want {
			t.Errorf("%s:\n got  %+v (%v, %v)\n want %+v", tt.action, e, ok, err, want)
		}
	}
	if _, _, err := TaskEntry(&taskv1.TaskEvent{EventId: "ev-x"}); !errors.Is(err, ErrNoCase) {
		t.Errorf("an envelope without an event: %v", err)
	}
}

func TestQuotaEntry(t *testing.T) {
	e, ok, err := QuotaEntry(&quotav1.QuotaEvent{EventId: "ev-q", AggregateId: "quota/q-1", Version: 2, TenantId: "acme", Actor: "adm_1",
		ActorIp: "198.51.100.4", OccurredAt: timestamppb.New(at), Event: &quotav1.QuotaEvent_QuotaCreated{QuotaCreated: &quotav1.QuotaCreated{
			Name: "gu", Kind: quotav1.QuotaKind_QUOTA_KIND_GU, Cluster: "local", Level: 1, MachineType: "A100", MinUnits: 4, MaxUnits: 8}}})
	want := domain.Entry{ID: "ev-q", At: at, Version: 2, TenantID: "acme", Action: "quota.created", Resource: "quota", ResourceID: "q-1",
		UserID: "adm_1", Details: `{"cluster":"local","kind":"QUOTA_KIND_GU","level":1,"machine_type":"A100","max_units":8,"min_units":4,"name":"gu"}`,
		IP: "198.51.100.4"}
	if err != nil || !ok || e != want {
		t.Errorf("quota created:\n got  %+v (%v, %v)\n want %+v", e, ok, err, want)
	}
	if _, ok, err := QuotaEntry(&quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadAdmitted{WorkloadAdmitted: &quotav1.WorkloadAdmitted{}}}); ok || err != nil {
		t.Errorf("a workload decision is audited: %v %v", ok, err)
	}
	e, ok, err = QuotaEntry(&quotav1.QuotaEvent{AggregateId: "tenant/acme", TenantId: "acme",
		Event: &quotav1.QuotaEvent_QuotaProduced{QuotaProduced: &quotav1.QuotaProduced{}}})
	if err != nil || !ok || e.ResourceID != "acme" || e.Action != "quota.produced" {
		t.Errorf("quota produced = %+v, %v, %v", e, ok, err)
	}
}

// Every task event has a row: one that audits it or one that says it is
// not audited.
func TestLifecycleCoverage(t *testing.T) {
	lifecycletest.EveryEvent(t, "the audit log (events.TaskEntry)", func(ev *taskv1.TaskEvent) error {
		_, _, err := TaskEntry(ev)
		return err
	})
}

// Likewise every quota event.
func TestQuotaEventCoverage(t *testing.T) {
	fields := (&quotav1.QuotaEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event").Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &quotav1.QuotaEvent{EventId: "ev", AggregateId: "quota/q"}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		if _, _, err := QuotaEntry(env); err != nil {
			t.Errorf("the audit log has no row for quota event %q: %v", fd.Name(), err)
		}
	}
}

func TestOrchestrationEntry(t *testing.T) {
	env := func(agg string, ev *taskv1.OrchestrationEvent) *taskv1.OrchestrationEvent {
		ev.EventId, ev.AggregateId, ev.TenantId, ev.Actor, ev.ActorIp, ev.OccurredAt = "ev-o", agg, "acme", "key-1", "192.0.2.8", timestamppb.New(at)
		return ev
	}
	tests := []struct {
		ev                         *taskv1.OrchestrationEvent
		action, resource, id, want string
	}{
		{env("g-1", &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCreated{TaskGroupCreated: &taskv1.TaskGroupCreated{
			Name: "nightly", Mode: "repeat", Repeat: &taskv1.RepeatDefinition{Count: 10}}}}),
			"task_group.created", "task_group", "g-1", `{"count":10,"max_parallel":0,"mode":"repeat","name":"nightly"}`},
		{env("g-1", &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCircuitOpened{TaskGroupCircuitOpened: &taskv1.TaskGroupCircuitOpened{
			ConsecutiveFailures: 3, Failures: 4}}}),
			"task_group.circuit_opened", "task_group", "g-1", `{"consecutive_failures":3,"failures":4}`},
		{env("g-1", &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCanceled{TaskGroupCanceled: &taskv1.TaskGroupCanceled{Reason: "x"}}}),
			"task_group.cancelled", "task_group", "g-1", `{"reason":"x"}`},
		{env("template/acme/echo", &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TemplateCreated{TemplateCreated: &taskv1.TemplateCreated{
			Template: &taskv1.TaskTemplate{Id: "echo", Name: "Echo"}}}}),
			"template.created", "template", "echo", `{"name":"Echo"}`},
		{env("template/acme/echo", &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TemplateDeleted{TemplateDeleted: &taskv1.TemplateDeleted{}}}),
			"template.deleted", "template", "echo", `{}`},
	}
	for _, tt := range tests {
		e, ok, err := OrchestrationEntry(tt.ev)
		want := domain.Entry{ID: "ev-o", At: at, TenantID: "acme", Action: tt.action, Resource: tt.resource, ResourceID: tt.id,
			UserID: "key-1", Details: tt.want, IP: "192.0.2.8"}
		if err != nil || !ok || e != want {
			t.Errorf("%s:\n got  %+v (%v, %v)\n want %+v", tt.action, e, ok, err, want)
		}
	}
	if _, ok, err := OrchestrationEntry(env("g-1", &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupMembersChanged{
		TaskGroupMembersChanged: &taskv1.TaskGroupMembersChanged{}}})); ok || err != nil {
		t.Errorf("a member change is audited twice: %v %v", ok, err)
	}
}

// Likewise every orchestration event (task groups, templates).
func TestOrchestrationEventCoverage(t *testing.T) {
	fields := (&taskv1.OrchestrationEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event").Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &taskv1.OrchestrationEvent{EventId: "ev", AggregateId: "g"}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		if _, _, err := OrchestrationEntry(env); err != nil {
			t.Errorf("the audit log has no row for orchestration event %q: %v", fd.Name(), err)
		}
	}
}

func TestPipelineEntry(t *testing.T) {
	e, ok, err := PipelineEntry(&pipelinev1.JobEvent{EventId: "ev-j", AggregateId: "job-1", TenantId: "acme", Actor: "key-1",
		OccurredAt: timestamppb.New(at), Event: &pipelinev1.JobEvent_Failed{Failed: &pipelinev1.JobFailed{Step: "bie", Reason: "exit 3", TaskId: "t-9"}}})
	want := domain.Entry{ID: "ev-j", At: at, TenantID: "acme", Action: "job.failed", Resource: "job", ResourceID: "job-1", UserID: "key-1",
		Details: `{"reason":"exit 3","step":"bie","task_id":"t-9"}`}
	if err != nil || !ok || e != want {
		t.Errorf("job failed:\n got  %+v (%v, %v)\n want %+v", e, ok, err, want)
	}
	// A submission records the client's address.
	e, ok, err = PipelineEntry(&pipelinev1.JobEvent{EventId: "ev-s", AggregateId: "job-1", TenantId: "acme", Actor: "key-1", ActorIp: "192.0.2.10",
		OccurredAt: timestamppb.New(at), Event: &pipelinev1.JobEvent_Submitted{Submitted: &pipelinev1.JobSubmitted{ModelKey: "uploads/m", QuantKey: "uploads/q"}}})
	want = domain.Entry{ID: "ev-s", At: at, TenantID: "acme", Action: "job.created", Resource: "job", ResourceID: "job-1", UserID: "key-1",
		IP: "192.0.2.10", Details: `{"model_key":"uploads/m","quant_key":"uploads/q"}`}
	if err != nil || !ok || e != want {
		t.Errorf("job created:\n got  %+v (%v, %v)\n want %+v", e, ok, err, want)
	}
	if _, ok, err := PipelineEntry(&pipelinev1.JobEvent{Event: &pipelinev1.JobEvent_Progressed{Progressed: &pipelinev1.JobProgressed{}}}); ok || err != nil {
		t.Errorf("a progress report is audited: %v %v", ok, err)
	}
}

// Likewise every pipeline job event.
func TestPipelineEventCoverage(t *testing.T) {
	fields := (&pipelinev1.JobEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event").Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &pipelinev1.JobEvent{EventId: "ev", AggregateId: "job"}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		if _, _, err := PipelineEntry(env); err != nil {
			t.Errorf("the audit log has no row for pipeline event %q: %v", fd.Name(), err)
		}
	}
}

// Every action's resource is one the API filters by.
func TestActionsUseKnownResources(t *testing.T) {
	for _, r := range Resources() {
		if !slices.Contains(domain.Resources, r) {
			t.Errorf("resource %q is written but not in domain.Resources", r)
		}
	}
	for _, a := range []string{"task.created", "task.started", "task.completed", "task.failed", "task.cancelled", "task.preempted",
		"template.created", "template.updated", "template.deleted", "task_group.repeat_reset"} {
		if !slices.Contains(Actions(), a) {
			t.Errorf("the document's action %s is missing", a)
		}
	}
}

func TestAdminEntry(t *testing.T) {
	env := func(agg, tenant string, ev *adminv1.AdminEvent) *adminv1.AdminEvent {
		ev.EventId, ev.AggregateId, ev.TenantId, ev.Actor, ev.ActorIp, ev.OccurredAt = "ev-a", agg, tenant, "adm_1", "198.51.100.4", timestamppb.New(at)
		return ev
	}
	tests := []struct {
		ev                                 *adminv1.AdminEvent
		action, resource, id, tenant, want string
	}{
		{env("tenant/acme", "acme", &adminv1.AdminEvent{Event: &adminv1.AdminEvent_TenantCreated{TenantCreated: &adminv1.TenantCreated{
			Name: "Acme", Tier: "premium", RpmLimit: 60}}}),
			"tenant_account.created", "tenant_account", "acme", "acme", `{"name":"Acme","rpm_limit":60,"tier":"premium","tpm_limit":0}`},
		{env("api-key/key_1", "acme", &adminv1.AdminEvent{Event: &adminv1.AdminEvent_ApiKeyCreated{ApiKeyCreated: &adminv1.ApiKeyCreated{
			KeyId: "key_1", Name: "ci", Prefix: "abcd1234"}}}),
			"api_key.created", "api_key", "key_1", "acme", `{"name":"ci","prefix":"abcd1234","rpm_limit":0,"tpm_limit":0}`},
		{env("api-key/key_1", "acme", &adminv1.AdminEvent{Event: &adminv1.AdminEvent_ApiKeyRevoked{ApiKeyRevoked: &adminv1.ApiKeyRevoked{
			KeyId: "key_1", Prefix: "abcd1234"}}}),
			"api_key.revoked", "api_key", "key_1", "acme", `{"prefix":"abcd1234"}`},
		{env("admin-key/adm_2", "", &adminv1.AdminEvent{Event: &adminv1.AdminEvent_AdminKeyCreated{AdminKeyCreated: &adminv1.AdminKeyCreated{
			KeyId: "adm_2", Name: "ops", Prefix: "zz"}}}),
			"admin_key.created", "admin_key", "adm_2", "", `{"name":"ops","prefix":"zz"}`},
		{env("agent/gpu-1", "acme", &adminv1.AdminEvent{Event: &adminv1.AdminEvent_AgentRegistered{AgentRegistered: &adminv1.AgentRegistered{
			TokenId: "atk_1", Prefix: "p", AllowedCidrs: []string{"10.0.0.0/8"}}}}),
			"agent.registered", "agent", "gpu-1", "acme", `{"allowed_cidrs":["10.0.0.0/8"],"prefix":"p","token_id":"atk_1"}`},
		{env("agent/gpu-1", "", &adminv1.AdminEvent{Event: &adminv1.AdminEvent_AgentDrained{AgentDrained: &adminv1.AgentDrained{RunningTasks: 2}}}),
			"agent.drained", "agent", "gpu-1", "", `{"running_tasks":2}`},
	}
	for _, tt := range tests {
		e, ok, err := AdminEntry(tt.ev)
		want := domain.Entry{ID: "ev-a", At: at, TenantID: tt.tenant, Action: tt.action, Resource: tt.resource, ResourceID: tt.id,
			UserID: "adm_1", Details: tt.want, IP: "198.51.100.4"}
		if err != nil || !ok || e != want {
			t.Errorf("%s:\n got  %+v (%v, %v)\n want %+v", tt.action, e, ok, err, want)
		}
	}
}

// Likewise every admin event.
func TestAdminEventCoverage(t *testing.T) {
	fields := (&adminv1.AdminEvent{}).ProtoReflect().Descriptor().Oneofs().ByName("event").Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		env := &adminv1.AdminEvent{EventId: "ev", AggregateId: "agent/a"}
		m := env.ProtoReflect()
		m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
		if _, ok, err := AdminEntry(env); err != nil || !ok {
			t.Errorf("the audit log has no entry for admin event %q: %v, %v", fd.Name(), ok, err)
		}
	}
}

// No two topics write the same resource or action: a replay of one
// topic's rows (selected by resource) never touches another's, and the
// gateway's tenant changes stay apart from the quota service's.
func TestTopicsShareNoResourceOrAction(t *testing.T) {
	owner := map[string]string{}
	for topic, rs := range map[string][]string{"task": TaskResources(), "orchestration": OrchestrationResources(),
		"pipeline": PipelineResources(), "quota": QuotaResources(), "admin": AdminResources()} {
		for _, r := range rs {
			if o, ok := owner[r]; ok {
				t.Errorf("resource %q is written by the %s and the %s topics", r, o, topic)
			}
			owner[r] = topic
		}
	}
	seen := map[string]bool{}
	for _, a := range Actions() {
		if seen[a] {
			t.Errorf("action %q is written by two rules", a)
		}
		seen[a] = true
	}
}
