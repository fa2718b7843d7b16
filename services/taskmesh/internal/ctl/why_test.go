package ctl

import (
	"bytes"
	"strings"
	"testing"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// `ctl tasks why` shows the executor's reason beside the admission's: for
// a task leased to the Slurm backend and waiting in Slurm's queue, Slurm's
// state and reason; for running or pending tasks, nothing more.
func TestWhyShowsTheExecutorsReason(t *testing.T) {
	admitted := &quotav1.ExplainTaskAdmissionResponse{TaskId: "t1", ClusterQueue: "q", State: "admitted", Reason: "admitted to q"}
	tests := []struct {
		task *taskv1.Task
		want []string
		not  []string
	}{
		{&taskv1.Task{Status: "assigned", AssignedAgentId: "slurm-1", ProgressMessage: "slurm: job 12 PENDING (Resources)"},
			[]string{"status:      assigned to slurm-1", "slurm:       job 12 PENDING (Resources)"}, nil},
		{&taskv1.Task{Status: "assigned", AssignedAgentId: "k8s", ProgressMessage: "queued by Kueue"},
			[]string{"executor:    queued by Kueue"}, []string{"slurm:"}},
		{&taskv1.Task{Status: "running", ProgressMessage: "slurm: job 12 RUNNING on node-b"}, nil, []string{"slurm:", "status:"}},
		{&taskv1.Task{Status: "assigned"}, nil, []string{"slurm:", "executor:"}},
		{nil, []string{"state:       admitted"}, []string{"slurm:"}},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		if err := writeExplanation(&out, admitted, tt.task); err != nil {
			t.Fatal(err)
		}
		for _, w := range append(tt.want, "queue:       q") {
			if !strings.Contains(out.String(), w) {
				t.Errorf("task %v: output lacks %q:\n%s", tt.task, w, out.String())
			}
		}
		for _, n := range tt.not {
			if strings.Contains(out.String(), n) {
				t.Errorf("task %v: output has %q:\n%s", tt.task, n, out.String())
			}
		}
	}
}

// A task the admission layer does not know is explained from its own
// record: held for its dependencies (naming them and its ClusterQueue),
// or needing no admission.
func TestWhyExplainsATaskAdmissionDoesNotKnow(t *testing.T) {
	held := unknownToAdmission(&taskv1.Task{Id: "t2", Status: "pending", ClusterQueue: "gpu", HeldForDependencies: true,
		DependsOn: []string{"t0", "t1"}})
	if held.GetState() != "held" || held.GetClusterQueue() != "gpu" ||
		held.GetReason() != "held out of its ClusterQueue until its dependencies complete: t0, t1" {
		t.Errorf("held task: %v", held)
	}
	var out bytes.Buffer
	if err := writeExplanation(&out, held, nil); err != nil || !strings.Contains(out.String(), "state:       held") {
		t.Errorf("held task written: %v\n%s", err, out.String())
	}
	if free := unknownToAdmission(&taskv1.Task{Id: "t3", Status: "pending"}); free.GetState() != "none" ||
		free.GetReason() != "the task needs no admission" {
		t.Errorf("task without admission: %v", free)
	}
}
