package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	agentv1 "github.com/taskmesh/taskmesh/gen/taskmesh/agent/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// nodeAgent is the agent-local API (docs/api/agent-local.md) of the
// Taskmesh agent on a Slurm node: placement hands the task to it as a
// local task, so the agent's policy, limits, shim, logs and journal
// apply, and follows it there.
type nodeAgent struct {
	node string
	base string
	http *http.Client
}

// ErrLocalTaskNotFound: the node's agent has no such task.
var ErrLocalTaskNotFound = errors.New("the node's agent has no such task")

// errWrongMachine: the agent at the node's address is another machine's.
var errWrongMachine = errors.New("agent is not the node's")

// agentError is an answer of the local API with its business code.
type agentError struct {
	Status  int
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *agentError) Error() string {
	return fmt.Sprintf("agent-local API: HTTP %d: %d %s", e.Status, e.Code, e.Message)
}

var (
	readJSON  = protojson.UnmarshalOptions{DiscardUnknown: true}
	writeJSON = protojson.MarshalOptions{UseProtoNames: true}
)

func (a *nodeAgent) do(ctx context.Context, method, path string, in proto.Message, out proto.Message) error {
	var body io.Reader
	if in != nil {
		raw, err := writeJSON.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("agent of node %s: %w", a.node, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("agent of node %s: %w", a.node, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &agentError{Status: resp.StatusCode}
		_ = json.Unmarshal(raw, e)
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%w: %v", ErrLocalTaskNotFound, e)
		}
		return e
	}
	if out != nil {
		if err := readJSON.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("agent of node %s: decode: %w", a.node, err)
		}
	}
	return nil
}

// checkMachine makes sure the agent at the address is the node's: its
// machine id must be the Slurm node's name. A task must never run on a
// machine Slurm did not allocate.
func (a *nodeAgent) checkMachine(ctx context.Context) error {
	var st agentv1.GetQueueStatusResponse
	if err := a.do(ctx, http.MethodGet, "/api/v1/queue/status", nil, &st); err != nil {
		return err
	}
	if st.GetMachineId() != a.node {
		return fmt.Errorf("%w: %s answers as machine %q, Slurm allocated node %q", errWrongMachine, a.base, st.GetMachineId(), a.node)
	}
	return nil
}

// create queues the task on the node's agent, under a fence of fence
// (its SIGKILL grace after it) that renew moves on
// (docs/api/agent-local.md, "Fenced local tasks").
func (a *nodeAgent) create(ctx context.Context, spec *taskv1.TaskSpec, fence, grace time.Duration) (*agentv1.LocalTask, error) {
	var t agentv1.LocalTask
	q := url.Values{}
	q.Set("fence_ms", strconv.FormatInt(fence.Milliseconds(), 10))
	q.Set("fence_grace_ms", strconv.FormatInt(grace.Milliseconds(), 10))
	if err := a.do(ctx, http.MethodPost, "/api/v1/tasks?"+q.Encode(), spec, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// renew moves the local task's fence to fence from now and reads it.
func (a *nodeAgent) renew(ctx context.Context, id string, fence time.Duration) (*agentv1.LocalTask, error) {
	var t agentv1.LocalTask
	req := &agentv1.RenewLocalTaskFenceRequest{FenceMs: int32(max(fence.Milliseconds(), 0))}
	if err := a.do(ctx, http.MethodPost, "/api/v1/tasks/"+url.PathEscape(id)+"/fence", req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// get reads a local task.
func (a *nodeAgent) get(ctx context.Context, id string) (*agentv1.LocalTask, error) {
	var t agentv1.LocalTask
	if err := a.do(ctx, http.MethodGet, "/api/v1/tasks/"+url.PathEscape(id), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// find returns the newest local task of that name, or nil.
func (a *nodeAgent) find(ctx context.Context, name string) (*agentv1.LocalTask, error) {
	var list agentv1.ListLocalTasksResponse
	if err := a.do(ctx, http.MethodGet, "/api/v1/tasks?limit=1000", nil, &list); err != nil {
		return nil, err
	}
	for _, t := range list.GetTasks() {
		if t.GetName() == name && t.GetOrigin() == "local" {
			return t, nil
		}
	}
	return nil, nil
}

// cancel stops a local task (SIGTERM, its grace, SIGKILL), with grace
// instead of the task's own when not nil. One that has already ended is
// not an error.
func (a *nodeAgent) cancel(ctx context.Context, id string, grace *time.Duration) error {
	req := &agentv1.CancelLocalTaskRequest{}
	if grace != nil {
		// Whole seconds, rounded down: never later than asked.
		req.GracePeriodSec = proto.Int32(int32(*grace / time.Second))
	}
	err := a.do(ctx, http.MethodPost, "/api/v1/tasks/"+url.PathEscape(id)+"/cancel", req, nil)
	var ae *agentError
	if errors.As(err, &ae) && ae.Code == 30002 {
		return nil // already final
	}
	return err
}

// localTaskFinal reports whether the local task has ended.
func localTaskFinal(t *agentv1.LocalTask) bool {
	switch t.GetStatus() {
	case "completed", "failed", "cancelled", "preempted":
		return true
	}
	return false
}

// agentResolver finds a node's agent: an explicit address, or the
// template with {node} replaced by the node's name.
type agentResolver struct {
	byNode   map[string]string
	template string
	http     *http.Client
}

func (r agentResolver) resolve(node string) (*nodeAgent, error) {
	base := r.byNode[node]
	if base == "" && r.template != "" {
		base = strings.ReplaceAll(r.template, "{node}", node)
	}
	if base == "" {
		return nil, fmt.Errorf("no Taskmesh agent is configured for Slurm node %q (--slurm-node-agents or --slurm-node-agent-url)", node)
	}
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("agent address %q of node %q is not a URL", base, node)
	}
	return &nodeAgent{node: node, base: strings.TrimSuffix(u.String(), "/"), http: r.http}, nil
}

// localTaskName names the local task of an attempt, so that a restarted
// backend finds it instead of creating a second one.
func localTaskName(attemptID string) string { return "tm-" + attemptID }

// localTaskSpec is the task as the node's agent runs it, inside the
// allocation Slurm made: the GPUs Slurm picked are the visible ones.
func localTaskSpec(t *taskv1.Task, job Job) *taskv1.TaskSpec {
	env := map[string]string{}
	for k, v := range t.GetEnv() {
		env[k] = v
	}
	env["SLURM_JOB_ID"] = strconv.FormatInt(job.ID, 10)
	env["SLURM_JOB_NODELIST"] = job.Nodes
	if gpus := job.GPUIndexes(); gpus != "" {
		env["CUDA_VISIBLE_DEVICES"] = gpus
	}
	spec := &taskv1.TaskSpec{
		Name: localTaskName(t.GetAttemptId()), Type: t.GetType(), Command: t.GetCommand(), Args: t.GetArgs(),
		Workdir: t.GetWorkdir(), Env: env,
		// Always given: the server's value is the effective one (its
		// default filled at submission), and 0 is no grace, not "unset".
		GracePeriodSec: proto.Int32(t.GetGracePeriodSec()),
	}
	if t.GetTimeout() > 0 {
		spec.Timeout = proto.Int32(t.GetTimeout())
	}
	if t.GetPriority() > 0 {
		spec.Priority = proto.Int32(t.GetPriority())
	}
	return spec
}
