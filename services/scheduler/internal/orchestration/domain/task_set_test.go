package domain

import (
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// A group of tasks follows its tasks: running while one is open, then
// failed, cancelled or completed; members in creation order, known by
// their task ids; the version grows with any task's.
func TestTaskSetFollowsItsTasks(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	mk := func(id string, s task.Status, at int, version int64) task.Task {
		tk := task.Task{ID: id, TenantID: "t1", Status: s, Version: version, CreatedAt: t0.Add(time.Duration(at) * time.Second),
			UpdatedAt: t0.Add(time.Minute), Spec: task.Spec{Name: "n-" + id, GroupID: "g"}}
		if s.Final() && s != task.StatusCancelled {
			tk.EndedAt = t0.Add(time.Duration(30+at) * time.Second)
		}
		return tk
	}
	if _, ok := TaskSet("g", nil); ok {
		t.Fatal("no tasks made a group")
	}
	for _, tt := range []struct {
		name  string
		tasks []task.Task
		want  Status
	}{
		{"one open", []task.Task{mk("b", task.StatusCompleted, 2, 4), mk("a", task.StatusRunning, 1, 3)}, StatusRunning},
		{"all completed", []task.Task{mk("a", task.StatusCompleted, 1, 4), mk("b", task.StatusCompleted, 2, 4)}, StatusCompleted},
		{"one failed", []task.Task{mk("a", task.StatusCompleted, 1, 4), mk("b", task.StatusFailed, 2, 4), mk("c", task.StatusCancelled, 3, 2)}, StatusFailed},
		{"one cancelled", []task.Task{mk("a", task.StatusCompleted, 1, 4), mk("c", task.StatusCancelled, 3, 2)}, StatusCancelled},
	} {
		s, ok := TaskSet("g", tt.tasks)
		if !ok || s.Group.Status != tt.want || s.Group.ID != "g" || s.Group.Mode != ModeParallel || s.Group.Total != len(tt.tasks) {
			t.Errorf("%s: %+v, want %s", tt.name, s.Group, tt.want)
			continue
		}
		ordered := s.Ordered()
		if ordered[0].Key != "a" || ordered[0].TaskID != "a" || ordered[0].Name != "n-a" || !s.Group.CreatedAt.Equal(t0.Add(time.Second)) {
			t.Errorf("%s: first member %+v, created %s", tt.name, ordered[0], s.Group.CreatedAt)
		}
		if tt.want == StatusRunning && !s.Group.EndedAt.IsZero() {
			t.Errorf("%s: a running group ended at %s", tt.name, s.Group.EndedAt)
		}
		if tt.want != StatusRunning && s.Group.EndedAt.IsZero() {
			t.Errorf("%s: an ended group has no end", tt.name)
		}
	}
	before, _ := TaskSet("g", []task.Task{mk("a", task.StatusRunning, 1, 3), mk("b", task.StatusPending, 2, 1)})
	after, _ := TaskSet("g", []task.Task{mk("a", task.StatusRunning, 1, 3), mk("b", task.StatusAssigned, 2, 2)})
	if after.Group.Version <= before.Group.Version {
		t.Errorf("version %d after a change of a task of a lower version, was %d", after.Group.Version, before.Group.Version)
	}
}
