package consumers_test

import (
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	auditv1 "github.com/taskmesh/taskmesh/gen/taskmesh/audit/v1"
	deadletterv1 "github.com/taskmesh/taskmesh/gen/taskmesh/deadletter/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/consumers"
)

func quotaRecord(t *testing.T, agg, tenant, id string, at time.Time, ev *quotav1.QuotaEvent) *kgo.Record {
	t.Helper()
	ev.EventId, ev.AggregateId, ev.TenantId, ev.Version, ev.OccurredAt, ev.Actor = id, agg, tenant, 1, timestamppb.New(at), "op"
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: consumers.QuotaTopic, Key: []byte(agg), Value: b,
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte(id)}}}
}

func orchestrationRecord(t *testing.T, agg, tenant, id string, at time.Time, ev *taskv1.OrchestrationEvent) *kgo.Record {
	t.Helper()
	ev.EventId, ev.AggregateId, ev.TenantId, ev.Version, ev.OccurredAt, ev.Actor = id, agg, tenant, 1, timestamppb.New(at), "key-"+tenant
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: consumers.OrchestrationTopic, Key: []byte(agg), Value: b,
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte(id)}}}
}

func adminRecord(t *testing.T, agg, tenant, id string, at time.Time, ev *adminv1.AdminEvent) *kgo.Record {
	t.Helper()
	ev.EventId, ev.AggregateId, ev.TenantId, ev.Version, ev.OccurredAt, ev.Actor, ev.ActorIp = id, agg, tenant, 1, timestamppb.New(at), "adm_op", "203.0.113.50"
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: consumers.AdminTopic, Key: []byte(agg), Value: b,
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte(id)}}}
}

func listAudit(t *testing.T, s *service, ctx context.Context, r *auditv1.ListAuditLogsRequest) []*auditv1.AuditLog {
	t.Helper()
	resp, err := s.audit().ListAuditLogs(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetAuditLogs()
}

// The task, orchestration, pipeline, quota and admin topics reach the
// audit log, tasks and admin changes with the caller's address; tenants
// see their own entries (an operator key's creation is no tenant's),
// operators all; the
// replay of each runner equals the live rows; retention through the
// service archives and deletes.
func TestAuditLogFromEveryTopic(t *testing.T) {
	e := newEnv(t)
	secret := make([]byte, 32)
	rand.Read(secret)
	objects, err := objectstore.NewFS(objectstore.FSConfig{Root: t.TempDir(), BaseURL: "http://127.0.0.1:1/objects", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	// The retention's clock starts 20 days back, so the pass at start-up
	// expires nothing; the test moves it to now for its own pass.
	var clock atomic.Int64
	clock.Store(time.Now().Add(-20 * 24 * time.Hour).UnixNano())
	s := e.start(consumers.Config{Objects: objects, Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }})
	sc := newScript(t)
	old := time.Now().UTC().Add(-100 * 24 * time.Hour)
	ev := sc.add("acme", "task-1", old, submitted(&taskv1.TaskSpec{Name: "first"}))
	ev.ActorIp = "198.51.100.7"
	sc.records[0].Value, _ = proto.Marshal(ev) // the address the gateway saw
	sc.add("acme", "task-1", time.Now().UTC(), cancelled())
	sc.add("globex", "task-2", time.Now().UTC(), submitted(&taskv1.TaskSpec{Name: "second"}))
	e.produce(sc.records)
	now := time.Now().UTC()
	e.produce([]*kgo.Record{
		quotaRecord(t, "quota/q-1", "acme", "q-ev-1", now, &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_QuotaProduced{QuotaProduced: &quotav1.QuotaProduced{}}}),
		quotaRecord(t, "quota/q-1", "acme", "q-ev-2", now, &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_QuotaUnsubscribed{QuotaUnsubscribed: &quotav1.QuotaUnsubscribed{Reason: "done"}}}),
		quotaRecord(t, "workload/task-1", "acme", "q-ev-3", now, &quotav1.QuotaEvent{Event: &quotav1.QuotaEvent_WorkloadFinished{WorkloadFinished: &quotav1.WorkloadFinished{}}}),
	})
	e.produce([]*kgo.Record{
		orchestrationRecord(t, "group-1", "acme", "o-ev-1", now, &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCreated{
			TaskGroupCreated: &taskv1.TaskGroupCreated{Name: "nightly", Mode: "repeat", Repeat: &taskv1.RepeatDefinition{Count: 10}}}}),
		orchestrationRecord(t, "group-1", "acme", "o-ev-2", now, &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupMembersReleased{
			TaskGroupMembersReleased: &taskv1.TaskGroupMembersReleased{}}}),
		orchestrationRecord(t, "group-1", "acme", "o-ev-3", now, &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupRepeatReset{
			TaskGroupRepeatReset: &taskv1.TaskGroupRepeatReset{Operator: "admin:ops", Reason: "rig fixed"}}}),
		orchestrationRecord(t, "template/globex/echo", "globex", "o-ev-4", now, &taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TemplateDeleted{
			TemplateDeleted: &taskv1.TemplateDeleted{}}}),
	})
	job := &pipelinev1.JobEvent{EventId: "j-ev-1", AggregateId: "job-1", Version: 1, TenantId: "acme", Actor: "key-acme",
		OccurredAt: timestamppb.New(now), Event: &pipelinev1.JobEvent_Submitted{Submitted: &pipelinev1.JobSubmitted{ModelKey: "m.onnx"}}}
	b, err := proto.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	e.produce([]*kgo.Record{{Topic: consumers.PipelineTopic, Key: []byte("job-1"), Value: b,
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte("j-ev-1")}}}})
	e.produce([]*kgo.Record{
		adminRecord(t, "api-key/key_1", "acme", "a-ev-1", now, &adminv1.AdminEvent{Event: &adminv1.AdminEvent_ApiKeyCreated{
			ApiKeyCreated: &adminv1.ApiKeyCreated{KeyId: "key_1", Name: "ci", Prefix: "abcd1234"}}}),
		adminRecord(t, "admin-key/adm_2", "", "a-ev-2", now, &adminv1.AdminEvent{Event: &adminv1.AdminEvent_AdminKeyCreated{
			AdminKeyCreated: &adminv1.AdminKeyCreated{KeyId: "adm_2", Name: "ops", Prefix: "zz"}}}),
	})
	eventually(t, "eleven audit entries", func() bool { return len(listAudit(t, s, operator, &auditv1.ListAuditLogsRequest{})) == 11 })

	acme := listAudit(t, s, tenantKey("acme"), &auditv1.ListAuditLogsRequest{})
	var actions []string
	for _, a := range acme {
		actions = append(actions, a.GetAction())
	}
	slices.Sort(actions)
	if !slices.Equal(actions, []string{"api_key.created", "job.created", "quota.produced", "quota.unsubscribed", "task.cancelled", "task.created",
		"task_group.created", "task_group.repeat_reset"}) {
		t.Errorf("acme's actions = %v", actions)
	}
	created := listAudit(t, s, tenantKey("acme"), &auditv1.ListAuditLogsRequest{Resource: "task", Action: "created"})
	if len(created) != 1 || created[0].GetIp() != "198.51.100.7" || created[0].GetResourceId() != "task-1" ||
		created[0].GetUserId() != "key-acme" || created[0].GetDetails() == "" {
		t.Errorf("task.created = %v", created)
	}
	if q := listAudit(t, s, tenantKey("acme"), &auditv1.ListAuditLogsRequest{Resource: "quota", Action: "unsubscribed"}); len(q) != 1 ||
		q[0].GetResourceId() != "q-1" || q[0].GetDetails() != `{"reason":"done"}` {
		t.Errorf("quota.unsubscribed = %v", q)
	}
	if g := listAudit(t, s, tenantKey("acme"), &auditv1.ListAuditLogsRequest{Resource: "task_group", Action: "repeat_reset"}); len(g) != 1 ||
		g[0].GetResourceId() != "group-1" || g[0].GetDetails() != `{"operator":"admin:ops","reason":"rig fixed"}` {
		t.Errorf("task_group.repeat_reset = %v", g)
	}
	if tpl := listAudit(t, s, operator, &auditv1.ListAuditLogsRequest{Action: "template.deleted"}); len(tpl) != 1 ||
		tpl[0].GetResourceId() != "echo" || tpl[0].GetTenantId() != "globex" {
		t.Errorf("template.deleted = %v", tpl)
	}
	if k := listAudit(t, s, tenantKey("acme"), &auditv1.ListAuditLogsRequest{Resource: "api_key", Action: "created"}); len(k) != 1 ||
		k[0].GetResourceId() != "key_1" || k[0].GetUserId() != "adm_op" || k[0].GetIp() != "203.0.113.50" ||
		k[0].GetDetails() != `{"name":"ci","prefix":"abcd1234","rpm_limit":0,"tpm_limit":0}` {
		t.Errorf("api_key.created = %v", k)
	}
	if k := listAudit(t, s, operator, &auditv1.ListAuditLogsRequest{Action: "admin_key.created"}); len(k) != 1 || k[0].GetTenantId() != "" {
		t.Errorf("admin_key.created = %v", k)
	}
	if tpl := listAudit(t, s, tenantKey("acme"), &auditv1.ListAuditLogsRequest{Resource: "template"}); len(tpl) != 0 {
		t.Errorf("acme sees globex's template entries: %v", tpl)
	}
	if _, err := s.audit().ListAuditLogs(tenantKey("acme"), &auditv1.ListAuditLogsRequest{Resource: "spaceship"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad resource: %v", err)
	}

	for _, spec := range consumers.ReplaySpecs(e.broker.Config()) {
		if !strings.HasPrefix(spec.Name, "audit_") {
			continue
		}
		rep, err := projection.Replay(context.Background(), e.pool, spec)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Equal() {
			t.Errorf("replay of %s = %+v", spec.Name, rep)
		}
	}

	clock.Store(time.Now().UnixNano())
	keys, deleted, err := s.Service.ExpireAudit(context.Background())
	if err != nil || deleted != 1 || len(keys) != 1 {
		t.Fatalf("expire = %v, %d, %v", keys, deleted, err)
	}
	if rest := listAudit(t, s, operator, &auditv1.ListAuditLogsRequest{}); len(rest) != 10 {
		t.Errorf("%d entries after the retention, want 10", len(rest))
	}
	rep, err := projection.Replay(context.Background(), e.pool, consumers.ReplaySpecs(e.broker.Config())[0])
	if err != nil || !rep.Equal() {
		t.Errorf("replay after the retention = %+v, %v", rep, err)
	}
}

// A record no consumer can read is parked by each of them, the others go
// on, and the dead letters are listed, retried and dropped through the
// service's DeadLetterService.
func TestDeadLettersOfEveryConsumer(t *testing.T) {
	e := newEnv(t)
	s := e.start(consumers.Config{})
	sc := newScript(t)
	sc.add("acme", "task-1", time.Now(), submitted(&taskv1.TaskSpec{Name: "fine"}))
	garbage := &kgo.Record{Topic: consumers.TaskTopic, Key: []byte("task-x"), Value: []byte{0xff, 0xfe, 0x00},
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte("ev-garbage")}}}
	after := newScript(t)
	after.versions["task-1"] = 1
	after.add("acme", "task-1", time.Now(), succeeded(""))
	e.produce(append(append(sc.records, garbage), after.records...))
	// The same on the orchestration topic, before a breaker opening.
	orchGarbage := &kgo.Record{Topic: consumers.OrchestrationTopic, Key: []byte("group-x"), Value: []byte{0xff, 0xfe, 0x00},
		Headers: []kgo.RecordHeader{{Key: projection.EventIDHeader, Value: []byte("ev-garbage")}}}
	e.produce([]*kgo.Record{orchGarbage, orchestrationRecord(t, "group-1", "acme", "o-ev-1", time.Now(),
		&taskv1.OrchestrationEvent{Event: &taskv1.OrchestrationEvent_TaskGroupCircuitOpened{TaskGroupCircuitOpened: &taskv1.TaskGroupCircuitOpened{}}})})

	eventually(t, "five dead letters", func() bool {
		l, err := s.deadLetters().ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{})
		return err == nil && len(l.GetDeadLetters()) == 5
	})
	l, _ := s.deadLetters().ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{})
	var names []string
	for _, d := range l.GetDeadLetters() {
		names = append(names, d.GetProjection())
		if d.GetEventId() != "ev-garbage" || d.GetService() != "consumers" || string(d.GetPayload()) != "\xff\xfe\x00" {
			t.Errorf("dead letter %v", d)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"audit_orchestration", "audit_tasks", "usage", "webhook_alerts", "webhooks"}) {
		t.Errorf("parked by %v", names)
	}
	// The record after the garbage was applied by everyone.
	eventually(t, "task.completed", func() bool {
		return len(listAudit(t, s, operator, &auditv1.ListAuditLogsRequest{Action: "task.completed"})) == 1
	})
	eventually(t, "task_group.circuit_opened", func() bool {
		return len(listAudit(t, s, operator, &auditv1.ListAuditLogsRequest{Action: "task_group.circuit_opened"})) == 1
	})
	first := l.GetDeadLetters()[0]
	r, err := s.deadLetters().RetryDeadLetter(operator, &deadletterv1.RetryDeadLetterRequest{Service: "consumers", Id: first.GetId()})
	if err != nil || r.GetOutcome() != "failed" || r.GetDeadLetter().GetAttempts() <= first.GetAttempts() {
		t.Errorf("retry of garbage = %v, %v", r, err)
	}
	for _, d := range l.GetDeadLetters() {
		if _, err := s.deadLetters().DropDeadLetter(operator, &deadletterv1.DropDeadLetterRequest{Service: "consumers", Id: d.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	if l, _ := s.deadLetters().ListDeadLetters(operator, &deadletterv1.ListDeadLettersRequest{}); len(l.GetDeadLetters()) != 0 {
		t.Errorf("left after dropping: %v", l)
	}
	if _, err := s.deadLetters().ListDeadLetters(tenantKey("acme"), &deadletterv1.ListDeadLettersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a tenant listing dead letters: %v", err)
	}
}
