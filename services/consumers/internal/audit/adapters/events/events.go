// Package events turns the events of the task, orchestration, pipeline,
// quota and admin topics into audit log entries: the convert step of the
// audit projections.
//
// What is audited is one table per topic, keyed by the name of the event's
// case in its envelope's oneof (TaskEvent.submitted, QuotaEvent.quota_produced,
// …). A row names the action, the resource, and the event fields worth
// keeping as details (a path into the event message, under the key it is
// shown with). So auditing a new event is one row; an event deliberately
// not audited has a row with no action. An event with no row at all is
// ErrNoCase, which the coverage tests turn into a failure for every event
// the protos define, and which at run time parks the record as a dead
// letter until this build knows it.
//
// Entries depend on the event alone, and every text is cleaned of what
// Postgres cannot store (pg.CleanText), so a replay writes the same rows.
package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	adminv1 "github.com/taskmesh/taskmesh/gen/taskmesh/admin/v1"
	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/consumers/internal/audit/domain"
)

// ErrNoCase is returned for an event the tables have no row for.
var ErrNoCase = errors.New("audit: no case for the event")

// rule is one row of an audit table. An empty action means the event is
// deliberately not audited.
type rule struct {
	action   string
	resource string
	// details maps a detail's key to the path of its field in the event
	// message ("spec.name").
	details map[string]string
	// machine is the path of the field holding the machine id, if any.
	machine string
}

// d builds a details map from key/path pairs; a key equal to its path's
// last element may be given alone.
func d(keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		key, path, ok := strings.Cut(k, "=")
		if !ok {
			path = key
			if i := strings.LastIndexByte(key, '.'); i >= 0 {
				key = key[i+1:]
			}
		}
		out[key] = path
	}
	return out
}

// TaskRules audit the task topic; the actions of the task API's audit log
// (task.created … task.preempted) and one for every other change.
var taskRules = map[string]rule{
	"submitted":        {action: "task.created", resource: "task", details: d("spec.name", "spec.type", "spec.priority", "queue=cluster_queue")},
	"updated":          {action: "task.updated", resource: "task", details: d("spec.name", "spec.priority")},
	"admitted":         {action: "task.admitted", resource: "task", details: d("queue", "cluster_queue")},
	"dependencies_met": {action: "task.dependencies_met", resource: "task", details: d("cluster_queue")},
	"leased":           {action: "task.assigned", resource: "task", details: d("agent_id", "attempt_id"), machine: "machine_id"},
	"started":          {action: "task.started", resource: "task", details: d("attempt_id"), machine: "machine_id"},
	"progressed":       {action: "task.progress", resource: "task", details: d("progress")},
	"lease_renewed":    {action: "task.lease_renewed", resource: "task"},
	"succeeded":        {action: "task.completed", resource: "task", details: d("exit_code"), machine: "machine_id"},
	"failed":           {action: "task.failed", resource: "task", details: d("reason", "error", "exit_code", "retry_follows"), machine: "machine_id"},
	"retry_scheduled":  {action: "task.retry_scheduled", resource: "task", details: d("retry_count", "manual")},
	"lease_expired":    {action: "task.lease_expired", resource: "task", details: d("reason", "agent_id", "failed")},
	"preempted":        {action: "task.preempted", resource: "task", details: d("preempted_by", "reason"), machine: "machine_id"},
	"suspended":        {action: "task.suspended", resource: "task", details: d("reason")},
	"checkpointed":     {action: "task.checkpointed", resource: "task", details: d("attempt_id", "checkpoint=key", "size_bytes")},
	"requeued":         {action: "task.requeued", resource: "task", details: d("from=from_status", "reason")},
	"canceled":         {action: "task.cancelled", resource: "task", details: d("reason")},
	"deleted":          {action: "task.deleted", resource: "task"},
	"expired":          {action: "task.expired", resource: "task"},
}

// quotaRules audit the quota topic: tenants, clusters, quotas (production
// and unsubscription) and queue definitions. The steps of the provisioning
// machinery (Ray clusters, WorkGroups, inventory bookings) and the
// admission loop's workload decisions are not audited: they follow from
// the audited changes.
var quotaRules = map[string]rule{
	"tenant_created":          {action: "tenant.created", resource: "tenant", details: d("name")},
	"tenant_renamed":          {action: "tenant.renamed", resource: "tenant", details: d("name")},
	"cluster_created":         {action: "cluster.created", resource: "cluster", details: d("name", "description")},
	"inventory_set":           {action: "cluster.inventory_set", resource: "cluster", details: d("machine_type", "total_gpus")},
	"quota_created":           {action: "quota.created", resource: "quota", details: d("name", "kind", "cluster", "level", "machine_type", "min_units", "max_units")},
	"quota_updated":           {action: "quota.updated", resource: "quota", details: d("min_units", "max_units")},
	"quota_unsubscribed":      {action: "quota.unsubscribed", resource: "quota", details: d("reason")},
	"quota_deleted":           {action: "quota.deleted", resource: "quota"},
	"quota_produced":          {action: "quota.produced", resource: "quota"},
	"quota_production_failed": {action: "quota.production_failed", resource: "quota", details: d("reason")},
	"cluster_queue_defined":   {action: "cluster_queue.defined", resource: "cluster_queue", details: d("origin")},
	"cluster_queue_deleted":   {action: "cluster_queue.deleted", resource: "cluster_queue"},
	"cohort_defined":          {action: "cohort.defined", resource: "cohort", details: d("origin")},
	"cohort_deleted":          {action: "cohort.deleted", resource: "cohort"},
	"local_queue_defined":     {action: "local_queue.defined", resource: "local_queue", details: d("origin")},
	"local_queue_deleted":     {action: "local_queue.deleted", resource: "local_queue"},

	"inventory_reserved": {}, "inventory_released": {},
	"ray_cluster_provisioning": {}, "ray_cluster_applied": {}, "ray_cluster_running": {}, "ray_cluster_failed": {},
	"work_group_provisioning": {}, "work_group_applied": {}, "work_group_spec_changed": {}, "work_group_running": {},
	"work_group_failed": {}, "work_group_deleting": {}, "work_group_deleted": {},
	"workload_queued": {}, "workload_admitted": {}, "workload_preemption_requested": {}, "workload_evicted": {},
	"workload_finished": {},
}

// orchestrationRules audit the orchestration topic: task groups (repeat
// resets and breaker openings included) and templates, as the task API's
// audit log spells them (template.created|updated|deleted). A group's
// member releases and member status changes are not audited: the members'
// own task events are.
var orchestrationRules = map[string]rule{
	"task_group_created":          {action: "task_group.created", resource: "task_group", details: d("name", "mode", "max_parallel", "count=repeat.count")},
	"task_group_started":          {action: "task_group.started", resource: "task_group"},
	"task_group_members_released": {},
	"task_group_members_changed":  {},
	"task_group_completed":        {action: "task_group.completed", resource: "task_group"},
	"task_group_failed":           {action: "task_group.failed", resource: "task_group", details: d("reason")},
	"task_group_canceled":         {action: "task_group.cancelled", resource: "task_group", details: d("reason")},
	"task_group_deleted":          {action: "task_group.deleted", resource: "task_group"},
	"task_group_circuit_opened":   {action: "task_group.circuit_opened", resource: "task_group", details: d("consecutive_failures", "failures")},
	"task_group_repeat_reset":     {action: "task_group.repeat_reset", resource: "task_group", details: d("operator", "reason")},
	"template_created":            {action: "template.created", resource: "template", details: d("template.name")},
	"template_updated":            {action: "template.updated", resource: "template", details: d("template.name")},
	"template_deleted":            {action: "template.deleted", resource: "template"},
}

// pipelineRules audit the conversion pipeline's jobs: submission, each
// stage's task, each stage's end and the failure. Progress reports are not
// audited (the stage task's own events are).
var pipelineRules = map[string]rule{
	"submitted":       {action: "job.created", resource: "job", details: d("model_key", "quant_key")},
	"stage_queued":    {action: "job.stage_queued", resource: "job", details: d("stage", "task_id")},
	"progressed":      {},
	"stage_succeeded": {action: "job.stage_completed", resource: "job", details: d("stage", "task_id")},
	"failed":          {action: "job.failed", resource: "job", details: d("step", "reason", "task_id")},
}

// adminRules audit the admin topic: the gateway's tenants (resource
// tenant_account, apart from the quota topic's tenant: the gateway's
// tenant is the account with its tier and rate limits, the quota
// service's the holder of quotas), API keys, operator keys and agents.
// Details name keys and tokens by id and non-secret prefix; the events
// carry no secret to begin with.
var adminRules = map[string]rule{
	"tenant_created":        {action: "tenant_account.created", resource: "tenant_account", details: d("name", "tier", "rpm_limit", "tpm_limit")},
	"tenant_updated":        {action: "tenant_account.updated", resource: "tenant_account", details: d("name", "tier", "rpm_limit", "tpm_limit")},
	"api_key_created":       {action: "api_key.created", resource: "api_key", details: d("name", "prefix", "rpm_limit", "tpm_limit")},
	"api_key_revoked":       {action: "api_key.revoked", resource: "api_key", details: d("prefix")},
	"admin_key_created":     {action: "admin_key.created", resource: "admin_key", details: d("name", "prefix")},
	"admin_key_revoked":     {action: "admin_key.revoked", resource: "admin_key", details: d("prefix")},
	"agent_registered":      {action: "agent.registered", resource: "agent", details: d("token_id", "prefix", "allowed_cidrs")},
	"agent_token_rotated":   {action: "agent.token_rotated", resource: "agent", details: d("token_id", "prefix")},
	"agent_revoked":         {action: "agent.revoked", resource: "agent", details: d("token_id", "reason", "bound_ip", "used_from")},
	"agent_address_changed": {action: "agent.address_changed", resource: "agent", details: d("token_id", "from", "to")},
	"agent_drained":         {action: "agent.drained", resource: "agent", details: d("running_tasks")},
	"agent_undrained":       {action: "agent.undrained", resource: "agent", details: d("running_tasks")},
}

// envelope is what every topic's envelope has.
type envelope interface {
	proto.Message
	GetEventId() string
	GetAggregateId() string
	GetVersion() int64
	GetTenantId() string
	GetActor() string
	GetActorIp() string
}

// TaskEntry converts a task event; ok is false for one not audited.
func TaskEntry(ev *taskv1.TaskEvent) (e domain.Entry, ok bool, err error) {
	e, ok, err = entry(ev, taskRules)
	if ok {
		e.ResourceID = pg.CleanText(ev.GetAggregateId())
	}
	return e, ok, err
}

// QuotaEntry converts a quota event; ok is false for one not audited. The
// resource id is the aggregate id without its kind ("quota/q-1" → "q-1"),
// the address the one the gateway saw.
func QuotaEntry(ev *quotav1.QuotaEvent) (e domain.Entry, ok bool, err error) {
	e, ok, err = entry(ev, quotaRules)
	if ok {
		agg := ev.GetAggregateId()
		if _, id, cut := strings.Cut(agg, "/"); cut {
			agg = id
		}
		e.ResourceID = pg.CleanText(agg)
	}
	return e, ok, err
}

// OrchestrationEntry converts an orchestration event; ok is false for one
// not audited. A template's resource id is its id within its tenant (the
// aggregate is "template/<tenant>/<id>").
func OrchestrationEntry(ev *taskv1.OrchestrationEvent) (e domain.Entry, ok bool, err error) {
	e, ok, err = entry(ev, orchestrationRules)
	if ok {
		id := ev.GetAggregateId()
		if e.Resource == "template" {
			id = strings.TrimPrefix(id, "template/"+ev.GetTenantId()+"/")
		}
		e.ResourceID = pg.CleanText(id)
	}
	return e, ok, err
}

// PipelineEntry converts a pipeline job event; ok is false for one not
// audited.
func PipelineEntry(ev *pipelinev1.JobEvent) (e domain.Entry, ok bool, err error) {
	e, ok, err = entry(ev, pipelineRules)
	if ok {
		e.ResourceID = pg.CleanText(ev.GetAggregateId())
	}
	return e, ok, err
}

// AdminEntry converts an admin event; ok is false for one not audited. The
// resource id is the aggregate id without its kind ("api-key/key_1" →
// "key_1"), the address the one the gateway saw.
func AdminEntry(ev *adminv1.AdminEvent) (e domain.Entry, ok bool, err error) {
	e, ok, err = entry(ev, adminRules)
	if ok {
		agg := ev.GetAggregateId()
		if _, id, cut := strings.Cut(agg, "/"); cut {
			agg = id
		}
		e.ResourceID = pg.CleanText(agg)
	}
	return e, ok, err
}

func entry(ev envelope, rules map[string]rule) (domain.Entry, bool, error) {
	m := ev.ProtoReflect()
	fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("event"))
	if fd == nil {
		return domain.Entry{}, false, fmt.Errorf("%w: %s %s carries no event", ErrNoCase, m.Descriptor().Name(), ev.GetEventId())
	}
	r, known := rules[string(fd.Name())]
	if !known {
		return domain.Entry{}, false, fmt.Errorf("%w: %s.%s (%s)", ErrNoCase, m.Descriptor().Name(), fd.Name(), ev.GetEventId())
	}
	if r.action == "" {
		return domain.Entry{}, false, nil
	}
	event := m.Get(fd).Message()
	details := map[string]any{}
	for key, path := range r.details {
		if v, ok := field(event, path); ok {
			details[key] = v
		}
	}
	b, err := json.Marshal(details) // sorted keys: the same event, the same text
	if err != nil {
		return domain.Entry{}, false, fmt.Errorf("audit: details of %s: %w", r.action, err)
	}
	var at time.Time
	if ts := m.Get(m.Descriptor().Fields().ByName("occurred_at")).Message(); ts.IsValid() {
		at = time.Unix(ts.Get(ts.Descriptor().Fields().ByName("seconds")).Int(),
			ts.Get(ts.Descriptor().Fields().ByName("nanos")).Int()).UTC()
	}
	e := domain.Entry{ID: pg.CleanText(ev.GetEventId()), At: at, Version: ev.GetVersion(), TenantID: pg.CleanText(ev.GetTenantId()), Action: r.action,
		Resource: r.resource, UserID: pg.CleanText(ev.GetActor()), IP: pg.CleanText(ev.GetActorIp()), Details: pg.CleanText(string(b))}
	if r.machine != "" {
		if v, ok := field(event, r.machine); ok {
			e.MachineID, _ = v.(string)
		}
	}
	return e, true, nil
}

// field reads a scalar field by its path ("spec.name"): strings cleaned,
// enums by name, numbers and booleans as they are, a list of strings as
// a list; ok is false for a missing message on the way or a field that is
// none of these.
func field(m protoreflect.Message, path string) (any, bool) {
	parts := strings.Split(path, ".")
	for i, name := range parts {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd != nil && fd.IsList() && fd.Kind() == protoreflect.StringKind && i == len(parts)-1 {
			list := m.Get(fd).List()
			out := make([]string, list.Len())
			for j := range out {
				out[j] = pg.CleanText(list.Get(j).String())
			}
			return out, true
		}
		if fd == nil || fd.IsList() || fd.IsMap() {
			return nil, false
		}
		if i < len(parts)-1 {
			if fd.Message() == nil || !m.Has(fd) {
				return nil, false
			}
			m = m.Get(fd).Message()
			continue
		}
		v := m.Get(fd)
		switch fd.Kind() {
		case protoreflect.StringKind:
			return pg.CleanText(v.String()), true
		case protoreflect.BoolKind:
			return v.Bool(), true
		case protoreflect.EnumKind:
			if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
				return string(ev.Name()), true
			}
			return int64(v.Enum()), true
		case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
			protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
			if fd.HasPresence() && !m.Has(fd) {
				return nil, false // an optional number left out (e.g. no exit code)
			}
			return v.Int(), true
		case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
			return v.Uint(), true
		case protoreflect.FloatKind, protoreflect.DoubleKind:
			return v.Float(), true
		}
		return nil, false
	}
	return nil, false
}

// Actions lists every action the tables can write, sorted.
func Actions() []string {
	var out []string
	for _, table := range []map[string]rule{taskRules, orchestrationRules, pipelineRules, quotaRules, adminRules} {
		for _, r := range table {
			if r.action != "" {
				out = append(out, r.action)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Resources lists every resource the tables write.
func Resources() []string {
	return resources(taskRules, orchestrationRules, pipelineRules, quotaRules, adminRules)
}

// Resources the table of each topic writes: a replay of one topic's audit
// rows compares exactly these (no two topics share a resource, a test
// checks).
func TaskResources() []string          { return resources(taskRules) }
func OrchestrationResources() []string { return resources(orchestrationRules) }
func PipelineResources() []string      { return resources(pipelineRules) }
func QuotaResources() []string         { return resources(quotaRules) }
func AdminResources() []string         { return resources(adminRules) }

func resources(tables ...map[string]rule) []string {
	seen := map[string]bool{}
	var out []string
	for _, table := range tables {
		for _, r := range table {
			if r.resource != "" && !seen[r.resource] {
				seen[r.resource] = true
				out = append(out, r.resource)
			}
		}
	}
	sort.Strings(out)
	return out
}
