package domain

import (
	"errors"
	"strings"
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

func str(s string) *string { return &s }

func created(t *testing.T, spec Spec) Service {
	t.Helper()
	recs, err := New(t0, "svc-1", "tenant-a", "key-a", spec)
	if err != nil {
		t.Fatal(err)
	}
	return Fold(recs)
}

func TestNewFillsDefaultsAndRefusesBadSpecs(t *testing.T) {
	s := created(t, Spec{Name: " monitor ", Command: "sleep", AgentID: "agent-1"})
	if s.Spec.Name != "monitor" || s.Spec.Version != "1" || s.Spec.RestartPolicy != RestartAlways || s.Spec.DesiredState != DesiredRunning ||
		s.CreatedBy != "key-a" || s.Version != 1 {
		t.Fatalf("created %+v", s)
	}
	if state, pid, restarts, _ := s.Summary(); state != StatePending || pid != 0 || restarts != 0 {
		t.Fatalf("summary of a new service = %s %d %d", state, pid, restarts)
	}
	for field, spec := range map[string]Spec{
		"name":             {Command: "c", AgentID: "a"},
		"command":          {Name: "n", AgentID: "a"},
		"restart_policy":   {Name: "n", Command: "c", AgentID: "a", RestartPolicy: "sometimes"},
		"desired_state":    {Name: "n", Command: "c", AgentID: "a", DesiredState: "paused"},
		"agent_id":         {Name: "n", Command: "c"},
		"labels":           {Name: "n", Command: "c", Labels: []string{"bad label"}},
		"env":              {Name: "n", Command: "c", AgentID: "a", Env: map[string]string{"TASKMESH_X": "1"}},
		"grace_period_sec": {Name: "n", Command: "c", AgentID: "a", GracePeriod: -1},
	} {
		_, err := New(t0, "x", "t", "k", spec)
		var ie *task.InvalidError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("%s: %v", field, err)
		}
	}
	// A service is placed by an agent id or by labels, never both.
	_, err := New(t0, "x", "t", "k", Spec{Name: "n", Command: "c", AgentID: "a", Labels: []string{"gpu"}})
	if !errors.Is(err, task.ErrInvalid) || !strings.Contains(err.Error(), "agent_id") || !strings.Contains(err.Error(), "labels") {
		t.Errorf("agent_id with labels: %v", err)
	}
}

func TestUpdateRollsOnlyWithANewVersion(t *testing.T) {
	s := created(t, Spec{Name: "m", Command: "sleep", Args: []string{"1"}, AgentID: "agent-1"})
	if recs, err := s.Update(t0, "k", Change{DesiredState: str(DesiredRunning)}); err != nil || recs != nil {
		t.Fatalf("a no-op update = %v, %v", recs, err)
	}
	_, err := s.Update(t0, "k", Change{Args: []string{"2"}})
	var ie *task.InvalidError
	if !errors.As(err, &ie) || ie.Field != "version" {
		t.Fatalf("new args without a new version: %v", err)
	}
	recs, err := s.Update(t0.Add(time.Second), "k", Change{Version: str("2"), Args: []string{"2"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		s, _ = Apply(s, r)
	}
	if s.Spec.Version != "2" || s.Spec.Args[0] != "2" || s.Version != 2 {
		t.Fatalf("rolled = %+v", s)
	}
	recs, _ = s.Delete(t0, "k")
	s, _ = Apply(s, recs[0])
	if _, err := s.Update(t0, "k", Change{DesiredState: str(DesiredStopped)}); !errors.Is(err, task.ErrNotFound) {
		t.Fatalf("update of a deleted service: %v", err)
	}
	if s.Targets("agent-1", nil) {
		t.Fatal("a deleted service targets its agent")
	}
}

func TestReportsAreRecordedOnlyWhenTheyChange(t *testing.T) {
	s := created(t, Spec{Name: "m", Command: "sleep", Labels: []string{"gpu"}})
	if !s.Targets("a1", []string{"gpu", "x"}) || s.Targets("a2", []string{"x"}) {
		t.Fatal("label targeting")
	}
	running := Instance{State: StateRunning, PID: 10, Version: "1"}
	recs := s.Report(t0.Add(time.Second), "a1", running)
	if len(recs) != 1 {
		t.Fatalf("first report: %v", recs)
	}
	s, _ = Apply(s, recs[0])
	if recs := s.Report(t0.Add(2*time.Second), "a1", running); recs != nil {
		t.Fatalf("an unchanged report recorded %v", recs)
	}
	s, _ = Apply(s, s.Report(t0.Add(3*time.Second), "a2", Instance{State: StateBackoff, Restarts: 2, Version: "1"})[0])
	if state, pid, restarts, last := s.Summary(); state != StateBackoff || pid != 10 || restarts != 2 || !last.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("summary = %s %d %d %v", state, pid, restarts, last)
	}
	// Its agent lost: unknown, once.
	recs = s.AgentLost(t0.Add(time.Minute), "a1")
	if len(recs) != 1 {
		t.Fatalf("agent lost: %v", recs)
	}
	before := s
	s, _ = Apply(s, recs[0])
	if s.Instances["a1"].State != StateUnknown || before.Instances["a1"].State != StateRunning {
		t.Fatalf("after the loss %+v (before %+v)", s.Instances["a1"], before.Instances["a1"])
	}
	if s.AgentLost(t0.Add(2*time.Minute), "a1") != nil || s.AgentLost(t0, "a3") != nil {
		t.Fatal("marked unknown twice, or an agent that never ran it")
	}
	if state, _, _, _ := s.Summary(); state != StateUnknown {
		t.Fatalf("summary with an unknown instance = %s", state)
	}
}

type unknownEvent struct{}

func (unknownEvent) EventName() string { return "ServiceUnknown" }

func TestApplyReportsAnEventWithoutACase(t *testing.T) {
	if _, ok := Apply(Service{}, Record{Event: unknownEvent{}}); ok {
		t.Fatal("Apply has a case for an unknown event")
	}
}
