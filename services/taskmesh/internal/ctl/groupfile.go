package ctl

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// This file turns group files into CreateTaskGroup requests, like
// taskfile.go does for tasks, with the same care: every error names
// file:line, unknown keys are refused, optional numbers stay absent.
//
// Accepted forms (one group per YAML document; docs/ctl.md, "Group files"):
//
//	group: {mode: serial|parallel|dag, tasks: [{…}, …]}    a task group
//	repeat: {count: …, template: {…}}                      a repeat
//
// A member of tasks is a task mapping (taskfile.go) with, besides, id and
// depends_on (dag), template_id and variables; group also takes name,
// max_parallel, start, request_id and webhook, repeat takes its policy's
// fields, template (a task mapping), template_id, variables, name, start,
// request_id and webhook. A group's webhook notifies the group's end and
// every member without one of its own (docs/api/webhooks.md).

// groupKeys and repeatKeys are the keys of the two forms.
var (
	groupKeys  = []string{"name", "mode", "tasks", "max_parallel", "start", "request_id", "webhook"}
	repeatKeys = []string{"count", "parallel", "interval_sec", "max_failures", "backoff_sec", "circuit_breaker_threshold",
		"template", "template_id", "variables", "name", "start", "request_id", "webhook"}
)

// FileGroup is one group read from a file.
type FileGroup struct {
	Where   string
	Request *taskv1.CreateTaskGroupRequest
}

// ParseGroupFile reads every group of a file.
func ParseGroupFile(name string, data []byte) ([]FileGroup, error) {
	p := &fileParser{file: name}
	var out []FileGroup
	err := decodeDocuments(name, data, func(doc *yaml.Node) error {
		if len(doc.Content) == 0 || isNull(deref(doc.Content[0])) {
			return nil
		}
		g, err := p.groupDocument(deref(doc.Content[0]))
		if err != nil {
			return err
		}
		out = append(out, g)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, &FileError{File: name, Msg: "no group in file (want group: {mode, tasks} or repeat: {count, template})"}
	}
	return out, nil
}

func (p *fileParser) groupDocument(root *yaml.Node) (FileGroup, error) {
	if root.Kind != yaml.MappingNode {
		return FileGroup{}, p.errorf(root, "want group: {…} or repeat: {…}, got %s", kindName(root))
	}
	pairs, err := p.pairs(root, "")
	if err != nil {
		return FileGroup{}, err
	}
	for _, kv := range pairs {
		if kv.key != "group" && kv.key != "repeat" {
			if s := closest(kv.key, []string{"group", "repeat"}); s != "" {
				return FileGroup{}, p.errorf(kv.k, "unknown key %q at the top level (did you mean %q?)", kv.key, s)
			}
		}
	}
	if len(pairs) != 1 || (pairs[0].key != "group" && pairs[0].key != "repeat") {
		k := root
		if len(pairs) > 0 {
			k = pairs[0].k
			for _, kv := range pairs {
				if kv.key != "group" && kv.key != "repeat" {
					k = kv.k
				}
			}
		}
		return FileGroup{}, p.errorf(k, "a group file holds group: {…} or repeat: {…} alone per document (tasks go in task files: ctl tasks submit)")
	}
	g := FileGroup{Where: fmt.Sprintf("%s:%d", p.file, root.Line), Request: &taskv1.CreateTaskGroupRequest{}}
	body := pairs[0].v
	if body.Kind != yaml.MappingNode {
		return FileGroup{}, p.errorf(body, "%s: want a mapping, got %s", pairs[0].key, kindName(body))
	}
	if pairs[0].key == "group" {
		return g, p.group(body, g.Request)
	}
	return g, p.repeat(body, g.Request)
}

// common reads the keys both forms share; ok is false for another key.
func (p *fileParser) common(kv pair, path string, r *taskv1.CreateTaskGroupRequest) (ok bool, err error) {
	f := join(path, kv.key)
	switch kv.key {
	case "name":
		r.Name, err = p.str(kv.v, f)
	case "request_id":
		r.RequestId, err = p.str(kv.v, f)
	case "webhook":
		r.Webhook, err = p.webhook(kv.v, f)
	case "start":
		if isNull(kv.v) {
			return true, nil
		}
		if kv.v.Tag != "!!bool" {
			return true, p.errorf(kv.v, "%s: want true or false, got %s", f, describe(kv.v))
		}
		start := kv.v.Value == "true"
		r.Start = &start
	default:
		return false, nil
	}
	return true, err
}

func (p *fileParser) group(n *yaml.Node, r *taskv1.CreateTaskGroupRequest) error {
	pairs, err := p.pairs(n, "group")
	if err != nil {
		return err
	}
	for _, kv := range pairs {
		if ok, err := p.common(kv, "group", r); ok {
			if err != nil {
				return err
			}
			continue
		}
		f := join("group", kv.key)
		switch kv.key {
		case "mode":
			r.Mode, err = p.str(kv.v, f)
		case "max_parallel":
			var v *int32
			if v, err = p.optInt(kv.v, f); v != nil {
				r.MaxParallel = *v
			}
		case "tasks":
			r.Tasks, err = p.members(kv.v, f)
		default:
			return p.unknown(kv.k, "group", groupKeys)
		}
		if err != nil {
			return err
		}
	}
	if len(r.Tasks) == 0 {
		return p.errorf(n, "group has no tasks")
	}
	return nil
}

func (p *fileParser) members(n *yaml.Node, path string) ([]*taskv1.TaskGroupTask, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, "%s: want a list of tasks, got %s", path, kindName(n))
	}
	out := make([]*taskv1.TaskGroupTask, 0, len(n.Content))
	for i, item := range n.Content {
		item = deref(item)
		f := fmt.Sprintf("%s[%d]", path, i)
		if item.Kind != yaml.MappingNode {
			return nil, p.errorf(item, "%s: want a task mapping, got %s", f, kindName(item))
		}
		pairs, err := p.pairs(item, f)
		if err != nil {
			return nil, err
		}
		// template_id and variables are the member's; the rest is a task.
		var taskPairs []pair
		m := &taskv1.TaskGroupTask{}
		for _, kv := range pairs {
			switch kv.key {
			case "template_id":
				if m.TemplateId, err = p.str(kv.v, join(f, kv.key)); err != nil {
					return nil, err
				}
			case "variables":
				if m.Variables, err = p.variables(kv.v, join(f, kv.key)); err != nil {
					return nil, err
				}
			default:
				taskPairs = append(taskPairs, kv)
			}
		}
		t, err := p.taskPairs(item, taskPairs, f, "")
		if err != nil {
			return nil, err
		}
		if err := memberFromSpec(m, t.ID, t.Spec); err != nil {
			return nil, p.errorf(item, "%s: %v", f, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// memberFromSpec fills a member from a task mapping read as a TaskSpec.
// What a member cannot carry (one task per member) is refused here rather
// than by the server, with the file's line.
func memberFromSpec(m *taskv1.TaskGroupTask, id string, s *taskv1.TaskSpec) error {
	switch {
	case s.GetTargets() != nil:
		return errors.New("targets: a member is one task")
	case s.RepeatCount != nil:
		return errors.New("repeat_count: a member is one task (use a repeat: file)")
	case s.GetGroupId() != "":
		return errors.New("group_id: is set by the group")
	}
	m.Id, m.Name, m.Type, m.Command, m.Args, m.Workdir, m.Env = id, s.GetName(), s.GetType(), s.GetCommand(), s.GetArgs(), s.GetWorkdir(), s.GetEnv()
	m.Timeout, m.Priority, m.RetryDelay, m.MaxRetries = s.Timeout, s.Priority, s.RetryDelay, s.MaxRetries
	m.MachineId, m.ParentId, m.DependsOn, m.Distribution, m.Queue = s.GetMachineId(), s.GetParentId(), s.GetDependsOn(), s.GetDistribution(), s.GetQueue()
	m.Webhook = s.GetWebhook()
	m.LeaseTtlSec, m.RenewIntervalSec, m.HeartbeatIntervalSec, m.GracePeriodSec = s.LeaseTtlSec, s.RenewIntervalSec, s.HeartbeatIntervalSec, s.GracePeriodSec
	return nil
}

func (p *fileParser) repeat(n *yaml.Node, r *taskv1.CreateTaskGroupRequest) error {
	pairs, err := p.pairs(n, "repeat")
	if err != nil {
		return err
	}
	rp := &taskv1.RepeatPolicy{}
	r.Repeat = rp
	for _, kv := range pairs {
		if ok, err := p.common(kv, "repeat", r); ok {
			if err != nil {
				return err
			}
			continue
		}
		f := join("repeat", kv.key)
		switch kv.key {
		case "count":
			var v *int32
			if v, err = p.optInt(kv.v, f); v != nil {
				rp.Count = *v
			}
		case "parallel":
			rp.Parallel, err = p.optInt(kv.v, f)
		case "interval_sec":
			rp.IntervalSec, err = p.optInt(kv.v, f)
		case "max_failures":
			rp.MaxFailures, err = p.optInt(kv.v, f)
		case "backoff_sec":
			rp.BackoffSec, err = p.optInt(kv.v, f)
		case "circuit_breaker_threshold":
			rp.CircuitBreakerThreshold, err = p.optInt(kv.v, f)
		case "template":
			var t FileTask
			if t, err = p.task(kv.v, f, ""); err == nil {
				rp.Template = t.Spec
			}
		case "template_id":
			rp.TemplateId, err = p.str(kv.v, f)
		case "variables":
			rp.Variables, err = p.variables(kv.v, f)
		default:
			return p.unknown(kv.k, "repeat", repeatKeys)
		}
		if err != nil {
			return err
		}
	}
	if rp.Count == 0 {
		return p.errorf(n, "repeat has no count")
	}
	if rp.Template == nil && rp.TemplateId == "" {
		return p.errorf(n, "repeat has neither a template (a task) nor a template_id")
	}
	return nil
}

// variables reads template variables: numbers and booleans as written in
// YAML, everything else as text.
func (p *fileParser) variables(n *yaml.Node, path string) (map[string]*structpb.Value, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, "%s: want a mapping of names to values, got %s", path, describe(n))
	}
	pairs, err := p.pairs(n, path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*structpb.Value, len(pairs))
	for _, kv := range pairs {
		if kv.v.Kind != yaml.ScalarNode {
			return nil, p.errorf(kv.v, "%s.%s: want a string, number or boolean, got %s", path, kv.key, kindName(kv.v))
		}
		out[kv.key] = scalarValue(kv.v)
	}
	return out, nil
}

// scalarValue is a YAML scalar as a JSON value.
func scalarValue(n *yaml.Node) *structpb.Value {
	switch n.Tag {
	case "!!int", "!!float":
		var f float64
		if n.Decode(&f) == nil {
			return structpb.NewNumberValue(f)
		}
	case "!!bool":
		return structpb.NewBoolValue(n.Value == "true")
	case "!!null":
		return structpb.NewNullValue()
	}
	return structpb.NewStringValue(n.Value)
}
