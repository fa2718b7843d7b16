package ctl

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// This file turns task files (docs/ctl.md#task-files) into TaskSpecs. It is
// kept apart from the commands because it is the contract with users' files:
// every accepted key is listed here, with the TaskSpec field it fills.
//
// Accepted forms (one per YAML document; JSON is YAML too):
//
//	task: {name: …, command: …}          a single task
//	local_queue: {tasks: [{…}, {…}]}     an agent's local queue
//	{name: …, command: …}                a bare task mapping
//
// The files are parsed as yaml.Nodes rather than decoded into structs so
// that every error names file:line, unknown keys are refused (a typo such
// as "prority" would otherwise silently submit a task with the default
// priority), and optional numbers stay absent unless written, so the
// scheduler's defaults apply.

// FileTask is one task read from a file.
type FileTask struct {
	// Where names the task in messages: "file:line".
	Where string
	// ID is the file's id for the task. Submit sends it as the task's
	// name (the spec's id), so submitting the file again while its task
	// waits or runs creates nothing new, and runs it again once it ended;
	// with --request-id it is that retry key instead.
	ID string
	// Retry: ID came from --request-id (a retry key, never reused).
	Retry bool
	Spec  *taskv1.TaskSpec
}

// FileError is a problem with a task file, at a line when known.
type FileError struct {
	File string
	Line int // 0 when the position is unknown
	Col  int // 0 when only the line is known
	Msg  string
}

func (e *FileError) Error() string {
	if e.Line > 0 && e.Col > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// stateFields are what an agent's local queue records about a task's
// execution: every field of LocalTask (docs/api/agent-local.md#localtask)
// that is not a task key, so that a row of the agent's own task list
// resubmits as it is shown, and updated_at and created_at, which a
// queue's rows carry too. They describe one past execution on one
// machine and the server assigns them itself, so submit ignores them
// (with a note) instead of refusing files copied from an agent.
var stateFields = map[string]bool{
	"status": true, "attempt_id": true, "assigned_agent_id": true, "assigned_at": true,
	"lease_expires_at": true, "started_at": true, "ended_at": true, "last_heartbeat_at": true,
	"exit_code": true, "error": true, "stdout": true, "stderr": true, "retry_count": true,
	"retry_at": true, "origin": true, "progress": true,
	"created_at": true, "updated_at": true, "received_at": true, "synced": true, "sync_note": true,
}

// taskKeys are the keys of a task mapping, for "did you mean" hints.
var taskKeys = []string{
	"id", "name", "type", "command", "args", "workdir", "env", "timeout", "priority",
	"max_retries", "retry_delay", "machine_id", "group_id", "parent_id", "depends_on",
	"lease_ttl_sec", "renew_interval_sec", "heartbeat_interval_sec", "grace_period_sec",
	"repeat_count", "targets", "distribution", "queue", "webhook",
}

// ParseTaskFile reads every task of a file. name is used in messages
// ("<stdin>" for standard input). notes are things the user should know
// but that do not stop the submission, such as ignored state fields.
func ParseTaskFile(name string, data []byte) (tasks []FileTask, notes []string, err error) {
	p := &fileParser{file: name}
	if err := decodeDocuments(name, data, p.document); err != nil {
		return nil, nil, err
	}
	if len(p.tasks) == 0 {
		return nil, nil, &FileError{File: name, Msg: "no task in file (want task: {…}, local_queue: {tasks: […]} or a task mapping)"}
	}
	return p.tasks, p.notes, nil
}

type fileParser struct {
	file  string
	tasks []FileTask
	notes []string
}

func (p *fileParser) errorf(n *yaml.Node, format string, args ...any) error {
	return &FileError{File: p.file, Line: n.Line, Msg: fmt.Sprintf(format, args...)}
}

func (p *fileParser) document(doc *yaml.Node) error {
	if len(doc.Content) == 0 {
		return nil // an empty document (e.g. a trailing "---")
	}
	root := deref(doc.Content[0])
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return p.errorf(root, "want a mapping (task: {…}, local_queue: {…} or a task), got %s", kindName(root))
	}
	pairs, err := p.pairs(root, "")
	if err != nil {
		return err
	}
	switch {
	case has(pairs, "task"):
		for _, kv := range pairs {
			if kv.key != "task" {
				return p.errorf(kv.k, "unknown key %q beside task (a file holds task: {…} alone)", kv.key)
			}
		}
		t, err := p.task(lookup(pairs, "task"), "task", "")
		if err == nil {
			err = p.named(t, deref(lookup(pairs, "task")), "task")
		}
		if err != nil {
			return err
		}
		p.tasks = append(p.tasks, t)
	case has(pairs, "local_queue"):
		for _, kv := range pairs {
			if kv.key != "local_queue" {
				return p.errorf(kv.k, "unknown key %q beside local_queue", kv.key)
			}
		}
		return p.localQueue(lookup(pairs, "local_queue"))
	default:
		for _, kv := range pairs {
			switch kv.key {
			case "group", "repeat", "tasks":
				return p.errorf(kv.k, "%q files are task groups: submit them with ctl groups submit -f FILE", kv.key)
			}
			// A mistyped form key ("taks:", "local_queu:") would otherwise
			// read as a bare task with one unknown key and no hint.
			if top := closest(kv.key, append([]string{"task", "local_queue"}, taskKeys...)); (top == "task" || top == "local_queue") && !stateFields[kv.key] {
				return p.errorf(kv.k, "unknown key %q at the top level (did you mean %q?)", kv.key, top)
			}
		}
		t, err := p.taskPairs(root, pairs, "", "")
		if err == nil {
			err = p.named(t, root, "")
		}
		if err != nil {
			return err
		}
		p.tasks = append(p.tasks, t)
	}
	return nil
}

// localQueue reads an agent's local queue. agent_id and updated_at are the
// agent's bookkeeping; machine_id is the machine the queue belongs to, so
// it becomes the target of tasks that name none: resubmitting a queue
// should not move its work to other machines.
func (p *fileParser) localQueue(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, "local_queue: want a mapping, got %s", kindName(n))
	}
	pairs, err := p.pairs(n, "local_queue")
	if err != nil {
		return err
	}
	var machine string
	var tasks *yaml.Node
	var ignored []string
	for _, kv := range pairs {
		switch kv.key {
		case "agent_id", "updated_at":
			ignored = append(ignored, kv.key)
		case "machine_id":
			if machine, err = p.str(kv.v, "local_queue.machine_id"); err != nil {
				return err
			}
		case "tasks":
			tasks = kv.v
		default:
			return p.unknown(kv.k, "local_queue", []string{"agent_id", "machine_id", "updated_at", "tasks"})
		}
	}
	if len(ignored) > 0 {
		p.notes = append(p.notes, fmt.Sprintf("%s:%d: ignoring local_queue.%s (the agent's bookkeeping)",
			p.file, n.Line, strings.Join(ignored, ", local_queue.")))
	}
	if tasks == nil || (tasks.Kind == yaml.ScalarNode && tasks.Tag == "!!null") {
		return p.errorf(n, "local_queue has no tasks")
	}
	if tasks.Kind != yaml.SequenceNode {
		return p.errorf(tasks, "local_queue.tasks: want a list of tasks, got %s", kindName(tasks))
	}
	for i, item := range tasks.Content {
		path := fmt.Sprintf("local_queue.tasks[%d]", i)
		t, err := p.task(deref(item), path, machine)
		if err == nil {
			err = p.named(t, deref(item), path)
		}
		if err != nil {
			return err
		}
		p.tasks = append(p.tasks, t)
	}
	if machine != "" {
		p.notes = append(p.notes, fmt.Sprintf("%s:%d: tasks without machine_id target the queue's machine %s",
			p.file, n.Line, machine))
	}
	return nil
}

func (p *fileParser) task(n *yaml.Node, path, defaultMachine string) (FileTask, error) {
	if n.Kind != yaml.MappingNode {
		return FileTask{}, p.errorf(n, "%s: want a task mapping, got %s", path, kindName(n))
	}
	pairs, err := p.pairs(n, path)
	if err != nil {
		return FileTask{}, err
	}
	return p.taskPairs(n, pairs, path, defaultMachine)
}

// named checks that a task of a task file has a name: say where it is
// missing rather than send a task the server can only refuse. Group
// members are not checked here: a member may take its name from its
// template or its id.
func (p *fileParser) named(t FileTask, n *yaml.Node, path string) error {
	if strings.TrimSpace(t.Spec.GetName()) != "" {
		return nil
	}
	if path == "" {
		path = "the task"
	}
	return p.errorf(n, "%s: has no name (name: is required)", path)
}

// taskPairs maps one task mapping onto a TaskSpec, field by field.
func (p *fileParser) taskPairs(n *yaml.Node, pairs []pair, path, defaultMachine string) (FileTask, error) {
	t := FileTask{Where: fmt.Sprintf("%s:%d", p.file, n.Line), Spec: &taskv1.TaskSpec{}}
	s := t.Spec
	var ignored []string
	for _, kv := range pairs {
		f := join(path, kv.key)
		var err error
		switch kv.key {
		case "id":
			t.ID, err = p.str(kv.v, f)
		case "name":
			s.Name, err = p.str(kv.v, f)
		case "type":
			s.Type, err = p.str(kv.v, f)
		case "command":
			s.Command, err = p.str(kv.v, f)
		case "args":
			s.Args, err = p.strList(kv.v, f)
		case "workdir":
			s.Workdir, err = p.str(kv.v, f)
		case "env":
			s.Env, err = p.strMap(kv.v, f)
		case "timeout":
			s.Timeout, err = p.boundedInt(kv.v, f, 1, 604800)
		case "priority":
			s.Priority, err = p.boundedInt(kv.v, f, 1, 10)
		case "max_retries":
			s.MaxRetries, err = p.boundedInt(kv.v, f, 0, 100)
		case "retry_delay":
			s.RetryDelay, err = p.boundedInt(kv.v, f, 0, 86400)
		case "machine_id":
			s.MachineId, err = p.str(kv.v, f)
		case "group_id":
			s.GroupId, err = p.str(kv.v, f)
		case "parent_id":
			s.ParentId, err = p.str(kv.v, f)
		case "depends_on":
			s.DependsOn, err = p.strList(kv.v, f)
		case "lease_ttl_sec":
			s.LeaseTtlSec, err = p.optInt(kv.v, f)
		case "renew_interval_sec":
			s.RenewIntervalSec, err = p.optInt(kv.v, f)
		case "heartbeat_interval_sec":
			s.HeartbeatIntervalSec, err = p.optInt(kv.v, f)
		case "grace_period_sec":
			s.GracePeriodSec, err = p.optInt(kv.v, f)
		case "repeat_count":
			s.RepeatCount, err = p.optInt(kv.v, f)
		case "queue":
			s.Queue, err = p.str(kv.v, f)
		case "targets":
			s.Targets, err = p.targets(kv.v, f)
		case "distribution":
			s.Distribution, err = p.distribution(kv.v, f)
		case "webhook":
			s.Webhook, err = p.webhook(kv.v, f)
		default:
			if stateFields[kv.key] {
				ignored = append(ignored, kv.key)
				continue
			}
			what := "task"
			if path != "" {
				what = path
			}
			return FileTask{}, p.unknown(kv.k, what, taskKeys)
		}
		if err != nil {
			return FileTask{}, err
		}
	}
	// The queue's machine applies only where the task chose no placement
	// of its own.
	if s.MachineId == "" && defaultMachine != "" && s.GetTargets() == nil && s.GetDistribution() == nil {
		s.MachineId = defaultMachine
	}
	if len(ignored) > 0 {
		name := t.ID
		if name == "" {
			name = s.Name
		}
		p.notes = append(p.notes, fmt.Sprintf("%s: task %q: ignoring state fields %s (the server tracks state itself)",
			t.Where, name, strings.Join(ignored, ", ")))
	}
	return t, nil
}

// webhook reads the document's `webhook: {url: …}` block (§8.3).
// A bare URL, an empty mapping or a mapping without url is refused here
// with the file's line rather than sent as a webhook without a target.
func (p *fileParser) webhook(n *yaml.Node, path string) (*taskv1.Webhook, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, "%s: want {url: …}, got %s", path, describe(n))
	}
	pairs, err := p.pairs(n, path)
	if err != nil {
		return nil, err
	}
	w := &taskv1.Webhook{}
	for _, kv := range pairs {
		if kv.key != "url" {
			return nil, p.unknown(kv.k, path, []string{"url"})
		}
		if w.Url, err = p.str(kv.v, join(path, kv.key)); err != nil {
			return nil, err
		}
	}
	if w.Url == "" {
		return nil, p.errorf(n, "%s: url is missing", path)
	}
	return w, nil
}

func (p *fileParser) targets(n *yaml.Node, path string) (*taskv1.Targets, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, "%s: want a mapping with machine_ids and ips, got %s", path, kindName(n))
	}
	pairs, err := p.pairs(n, path)
	if err != nil {
		return nil, err
	}
	t := &taskv1.Targets{}
	for _, kv := range pairs {
		switch kv.key {
		case "machine_ids":
			t.MachineIds, err = p.strList(kv.v, join(path, kv.key))
		case "ips":
			t.Ips, err = p.strList(kv.v, join(path, kv.key))
		default:
			return nil, p.unknown(kv.k, path, []string{"machine_ids", "ips"})
		}
		if err != nil {
			return nil, err
		}
	}
	// "targets: {machine_ids: [], ips: []}" targets nothing; sending an
	// empty Targets keeps the request identical to leaving it out.
	if len(t.MachineIds) == 0 && len(t.Ips) == 0 {
		return nil, nil
	}
	return t, nil
}

func (p *fileParser) distribution(n *yaml.Node, path string) (*taskv1.Distribution, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errorf(n, "%s: want a mapping with mode, machine_id, labels and count, got %s", path, kindName(n))
	}
	pairs, err := p.pairs(n, path)
	if err != nil {
		return nil, err
	}
	d := &taskv1.Distribution{}
	for _, kv := range pairs {
		f := join(path, kv.key)
		switch kv.key {
		case "mode":
			d.Mode, err = p.str(kv.v, f)
		case "machine_id":
			d.MachineId, err = p.str(kv.v, f)
		case "labels":
			d.Labels, err = p.strList(kv.v, f)
		case "count":
			var c *int32
			if c, err = p.optInt(kv.v, f); c != nil {
				d.Count = *c
			}
		default:
			return nil, p.unknown(kv.k, path, []string{"mode", "machine_id", "labels", "count"})
		}
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// pair is one key of a mapping with its nodes, for line numbers.
type pair struct {
	key  string
	k, v *yaml.Node
}

// pairs lists a mapping's keys in order, refusing duplicates: YAML parsers
// disagree on which of two equal keys wins, so a file that has both is
// ambiguous.
func (p *fileParser) pairs(n *yaml.Node, path string) ([]pair, error) {
	out := make([]pair, 0, len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return nil, p.errorf(k, "%s: keys must be strings, got %s", orTop(path), kindName(k))
		}
		if k.Value == "<<" {
			return nil, p.errorf(k, "%s: YAML merge keys (<<) are not supported", orTop(path))
		}
		if line, dup := seen[k.Value]; dup {
			return nil, p.errorf(k, "duplicate key %q (first at line %d)", join(path, k.Value), line)
		}
		seen[k.Value] = k.Line
		out = append(out, pair{key: k.Value, k: k, v: v})
	}
	return out, nil
}

func (p *fileParser) unknown(k *yaml.Node, where string, known []string) error {
	msg := fmt.Sprintf("unknown key %q in %s", k.Value, where)
	if s := closest(k.Value, known); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return p.errorf(k, "%s", msg)
}

// str reads a string field. Any scalar is taken as written, so that
// unquoted values such as CUDA_VISIBLE_DEVICES: 0 or machine_id: 001 keep
// their text; null means absent.
func (p *fileParser) str(n *yaml.Node, path string) (string, error) {
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", p.errorf(n, "%s: want a string, got %s", path, kindName(n))
	}
	return n.Value, nil
}

// optInt reads an optional int32; null means absent. Quoted numbers are
// refused: a quoted value is usually a unit mistake ("1h", "60s") that
// must not be guessed at.
func (p *fileParser) optInt(n *yaml.Node, path string) (*int32, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return nil, p.errorf(n, "%s: want a whole number, got %s", path, describe(n))
	}
	var v int64
	if err := n.Decode(&v); err != nil || v < math.MinInt32 || v > math.MaxInt32 {
		return nil, p.errorf(n, "%s: %s is out of range", path, n.Value)
	}
	i := int32(v)
	return &i, nil
}

// boundedInt reads an optional int32 that must lie in [lo, hi]: the
// TaskSpec's ranges (docs/api/tasks.md#taskspec), checked here so that a
// file whose later document is out of range creates nothing at all
// rather than the documents before it.
func (p *fileParser) boundedInt(n *yaml.Node, path string, lo, hi int32) (*int32, error) {
	v, err := p.optInt(n, path)
	if err == nil && v != nil && (*v < lo || *v > hi) {
		return nil, p.errorf(n, "%s: %d is out of range (%d to %d)", path, *v, lo, hi)
	}
	return v, err
}

func (p *fileParser) strList(n *yaml.Node, path string) ([]string, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, "%s: want a list of strings, got %s", path, describe(n))
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		item = deref(item)
		if item.Kind != yaml.ScalarNode || isNull(item) {
			return nil, p.errorf(item, "%s[%d]: want a string, got %s", path, i, describe(item))
		}
		out = append(out, item.Value)
	}
	return out, nil
}

func (p *fileParser) strMap(n *yaml.Node, path string) (map[string]string, error) {
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
	out := make(map[string]string, len(pairs))
	for _, kv := range pairs {
		if kv.v.Kind != yaml.ScalarNode {
			return nil, p.errorf(kv.v, "%s.%s: want a string, got %s", path, kv.key, kindName(kv.v))
		}
		// An explicit null is an empty value rather than a missing
		// variable: "FOO:" in YAML reads as null but means FOO="".
		if isNull(kv.v) {
			out[kv.key] = ""
			continue
		}
		out[kv.key] = kv.v.Value
	}
	return out, nil
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func has(pairs []pair, key string) bool { return lookup(pairs, key) != nil }

func lookup(pairs []pair, key string) *yaml.Node {
	for _, kv := range pairs {
		if kv.key == key {
			return kv.v
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return "a scalar"
	}
	return "an unsupported node"
}

// describe shows a wrong value with its YAML type, e.g. string "1h".
func describe(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return kindName(n)
	}
	switch n.Tag {
	case "!!null":
		return "null"
	case "!!str":
		return "string " + strconv.Quote(n.Value)
	case "!!float":
		return "number " + n.Value
	case "!!bool":
		return "boolean " + n.Value
	}
	return n.Value
}

// closest returns the known key nearest to k when it is a plausible typo
// (edit distance at most 2), else "".
func closest(k string, known []string) string {
	sorted := append([]string(nil), known...)
	sort.Strings(sorted) // deterministic among equal distances
	best, bestD := "", 3
	for _, c := range sorted {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
