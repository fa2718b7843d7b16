// Package domain is the managed-service aggregate (docs/api/services.md):
// a long-running service (a sidecar such as a heartbeat or monitoring
// daemon) that agents keep alive. Pure decisions and one fold, like the
// task aggregate: each command returns the events to record, Apply folds
// them. Services never enter the task queue or admission.
//
// The declaration (name, version, command, restart policy, desired state,
// target) changes only through the tenant's commands; what runs is
// reported by the agents, one instance per agent, and recorded only when
// it changes (state, process, restarts, version), so a steady service
// costs no events. When an agent is lost, its instances become unknown.
package domain

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// Restart policies.
const (
	RestartAlways    = "always"
	RestartOnFailure = "on-failure"
	RestartNever     = "never"
)

// Desired states.
const (
	DesiredRunning = "running"
	DesiredStopped = "stopped"
)

// Current states of an instance (and, summarised, of a service).
const (
	StatePending  = "pending" // no agent has reported it yet
	StateStarting = "starting"
	StateRunning  = "running"
	StateBackoff  = "backoff" // ended, waiting to restart
	StateStopped  = "stopped"
	StateExited   = "exited"  // ended and not restarted (its policy)
	StateUnknown  = "unknown" // its agent is lost
)

// Defaults.
const (
	DefaultVersion     = "1"
	DefaultGracePeriod = 10
)

// Spec is what the tenant declared.
type Spec struct {
	Name          string            `json:"name"`
	Version       string            `json:"version"`
	Command       string            `json:"command"`
	Args          []string          `json:"args,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	RestartPolicy string            `json:"restart_policy"`
	DesiredState  string            `json:"desired_state"`
	AgentID       string            `json:"agent_id,omitempty"`
	Labels        []string          `json:"labels,omitempty"`
	GracePeriod   int               `json:"grace_period_sec"`
}

// Instance is the service on one agent, as last reported.
type Instance struct {
	AgentID  string    `json:"agent_id"`
	State    string    `json:"current_state"`
	PID      int       `json:"pid,omitempty"`
	Restarts int       `json:"restarts,omitempty"`
	Version  string    `json:"version,omitempty"`
	Error    string    `json:"error,omitempty"`
	At       time.Time `json:"at"`
}

// Service is the aggregate's state.
type Service struct {
	ID        string              `json:"id"`
	TenantID  string              `json:"tenant_id"`
	CreatedBy string              `json:"created_by,omitempty"`
	Spec      Spec                `json:"spec"`
	Instances map[string]Instance `json:"instances,omitempty"`
	CreatedAt time.Time           `json:"created_at"`
	UpdatedAt time.Time           `json:"updated_at"`
	Version   int64               `json:"version"`
	Deleted   bool                `json:"deleted,omitempty"`
}

// Events.
type (
	Event   interface{ EventName() string }
	Created struct {
		ID, TenantID, CreatedBy string
		Spec                    Spec
	}
	Updated          struct{ Spec Spec }
	Deleted          struct{}
	InstanceReported struct{ Instance Instance }
)

func (Created) EventName() string          { return "ServiceCreated" }
func (Updated) EventName() string          { return "ServiceUpdated" }
func (Deleted) EventName() string          { return "ServiceDeleted" }
func (InstanceReported) EventName() string { return "ServiceInstanceReported" }

// Record is an event with when and by whom.
type Record struct {
	Event Event
	At    time.Time
	Actor string
}

// Apply folds one event into s; ok is false for an event it has no case
// for.
func Apply(s Service, r Record) (Service, bool) {
	s.Version++
	s.UpdatedAt = r.At
	switch e := r.Event.(type) {
	case Created:
		s = Service{ID: e.ID, TenantID: e.TenantID, CreatedBy: e.CreatedBy, Spec: e.Spec, CreatedAt: r.At,
			UpdatedAt: r.At, Version: s.Version}
	case Updated:
		s.Spec = e.Spec
	case Deleted:
		s.Deleted = true
	case InstanceReported:
		// A copy: states handed out before stay as they were.
		s.Instances = maps.Clone(s.Instances)
		if s.Instances == nil {
			s.Instances = map[string]Instance{}
		}
		in := e.Instance
		in.At = r.At
		s.Instances[in.AgentID] = in
	default:
		return s, false
	}
	return s, true
}

// Fold replays records from the zero state.
func Fold(records []Record) Service {
	var s Service
	for _, r := range records {
		s, _ = Apply(s, r)
	}
	return s
}

var ident = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

// Normalize fills the defaults of spec and checks it; errors are
// *task.InvalidError naming the field (30005).
func Normalize(s Spec) (Spec, error) {
	s.Name = strings.TrimSpace(s.Name)
	if s.Version == "" {
		s.Version = DefaultVersion
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = RestartAlways
	}
	if s.DesiredState == "" {
		s.DesiredState = DesiredRunning
	}
	invalid := func(field, format string, args ...any) error {
		return &task.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case s.Name == "" || utf8.RuneCountInString(s.Name) > 255:
		return s, invalid("name", "is required, at most 255 characters")
	case s.Command == "" || strings.ContainsRune(s.Command, 0):
		return s, invalid("command", "is required and contains no NUL byte")
	case utf8.RuneCountInString(s.Version) > 128:
		return s, invalid("version", "is longer than 128 characters")
	case !slices.Contains([]string{RestartAlways, RestartOnFailure, RestartNever}, s.RestartPolicy):
		return s, invalid("restart_policy", "must be always, on-failure or never, not %q", s.RestartPolicy)
	case s.DesiredState != DesiredRunning && s.DesiredState != DesiredStopped:
		return s, invalid("desired_state", "must be running or stopped, not %q", s.DesiredState)
	case s.AgentID == "" && len(s.Labels) == 0:
		// A service is placed on purpose: with neither, it would run on
		// every agent of the pool.
		return s, invalid("agent_id", "or labels is required")
	case s.AgentID != "" && !ident.MatchString(s.AgentID):
		return s, invalid("agent_id", "%q is not a valid agent id", s.AgentID)
	case s.GracePeriod < 0 || s.GracePeriod > 3600:
		return s, invalid("grace_period_sec", "must be 0 to 3600 seconds")
	}
	for _, l := range s.Labels {
		if !ident.MatchString(l) {
			return s, invalid("labels", "%q is not a valid label", l)
		}
	}
	if err := task.CheckReservedEnv(s.Env); err != nil {
		return s, err
	}
	for k, v := range s.Env {
		if strings.ContainsRune(k, '=') || k == "" || strings.ContainsRune(v, 0) {
			return s, invalid("env", "key %q is not allowed", k)
		}
	}
	for _, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			return s, invalid("args", "an argument contains a NUL byte")
		}
	}
	return s, nil
}

// New declares a service.
func New(now time.Time, id, tenant, actor string, spec Spec) ([]Record, error) {
	spec, err := Normalize(spec)
	if err != nil {
		return nil, err
	}
	// With both, the labels would be stored and shown but never used: an
	// agent id alone places the service (Targets). Checked here, where the
	// target is given, because an update cannot change it.
	if spec.AgentID != "" && len(spec.Labels) > 0 {
		return nil, &task.InvalidError{Field: "labels", Reason: "cannot be given with agent_id; give exactly one of agent_id and labels"}
	}
	return []Record{{At: now, Actor: actor, Event: Created{ID: id, TenantID: tenant, CreatedBy: actor, Spec: spec}}}, nil
}

// Change is an update: nil fields keep their value.
type Change struct {
	DesiredState, Version, Command, RestartPolicy *string
	Args                                          []string
	Env                                           map[string]string
}

// Update changes the declaration. An update that changes nothing records
// nothing.
func (s Service) Update(now time.Time, actor string, c Change) ([]Record, error) {
	if s.Deleted {
		return nil, task.ErrNotFound
	}
	next := s.Spec
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&next.DesiredState, c.DesiredState)
	set(&next.Version, c.Version)
	set(&next.Command, c.Command)
	set(&next.RestartPolicy, c.RestartPolicy)
	if len(c.Args) > 0 {
		next.Args = c.Args
	}
	if len(c.Env) > 0 {
		next.Env = c.Env
	}
	next, err := Normalize(next)
	if err != nil {
		return nil, err
	}
	// A new command line under the same version would leave running
	// processes on the old one: the version is what agents roll on.
	if next.Version == s.Spec.Version && (next.Command != s.Spec.Command || !slices.Equal(next.Args, s.Spec.Args) ||
		!maps.Equal(next.Env, s.Spec.Env)) {
		return nil, &task.InvalidError{Field: "version", Reason: "must change when command, args or env change"}
	}
	if equalSpec(next, s.Spec) {
		return nil, nil
	}
	return []Record{{At: now, Actor: actor, Event: Updated{Spec: next}}}, nil
}

func equalSpec(a, b Spec) bool {
	return a.Name == b.Name && a.Version == b.Version && a.Command == b.Command && slices.Equal(a.Args, b.Args) &&
		maps.Equal(a.Env, b.Env) && a.RestartPolicy == b.RestartPolicy && a.DesiredState == b.DesiredState &&
		a.AgentID == b.AgentID && slices.Equal(a.Labels, b.Labels) && a.GracePeriod == b.GracePeriod
}

// Delete removes the service.
func (s Service) Delete(now time.Time, actor string) ([]Record, error) {
	if s.Deleted {
		return nil, task.ErrNotFound
	}
	return []Record{{At: now, Actor: actor, Event: Deleted{}}}, nil
}

// Report records what agentID observed, when it differs from what it
// reported last (the time alone is the liveness the store keeps apart).
func (s Service) Report(now time.Time, agentID string, in Instance) []Record {
	if s.Deleted {
		return nil
	}
	in.AgentID = agentID
	if cur, ok := s.Instances[agentID]; ok && cur.State == in.State && cur.PID == in.PID && cur.Restarts == in.Restarts &&
		cur.Version == in.Version && cur.Error == in.Error {
		return nil
	}
	return []Record{{At: now, Actor: "agent:" + agentID, Event: InstanceReported{Instance: in}}}
}

// AgentLost marks the service's instance on agentID unknown: nobody knows
// whether it still runs.
func (s Service) AgentLost(now time.Time, agentID string) []Record {
	cur, ok := s.Instances[agentID]
	if s.Deleted || !ok || cur.State == StateUnknown {
		return nil
	}
	cur.State = StateUnknown
	return []Record{{At: now, Actor: "scheduler", Event: InstanceReported{Instance: cur}}}
}

// Targets reports whether an agent with agentID and labels runs s.
func (s Service) Targets(agentID string, labels []string) bool {
	if s.Deleted {
		return false
	}
	if s.Spec.AgentID != "" {
		return s.Spec.AgentID == agentID
	}
	for _, l := range s.Spec.Labels {
		if !slices.Contains(labels, l) {
			return false
		}
	}
	return true
}

// severity orders states from best to worst for the summary.
var severity = map[string]int{StateRunning: 0, StateStopped: 1, StateStarting: 2, StatePending: 3, StateBackoff: 4,
	StateExited: 5, StateUnknown: 6}

// Summary is the service-level view of its instances: the worst state
// (pending without any), the first agent's process, restarts over all, and
// the last report.
func (s Service) Summary() (state string, pid, restarts int, last time.Time) {
	state = StatePending
	agents := slices.Sorted(maps.Keys(s.Instances))
	for i, a := range agents {
		in := s.Instances[a]
		if i == 0 {
			state, pid = in.State, in.PID
		} else if severity[in.State] > severity[state] {
			state = in.State
		}
		restarts += in.Restarts
		if in.At.After(last) {
			last = in.At
		}
	}
	return state, pid, restarts, last
}
