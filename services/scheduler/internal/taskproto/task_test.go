package taskproto

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// A task rendered for the API, read back and moved on by Apply renders the
// same as the aggregate moved on by Apply: the gateway's live streams,
// which fold events onto a GetTask answer, therefore show what GetTask
// would answer at every version. Random walks through the commands cover
// each event from the states it can follow.
func TestRenderedTaskFoldsLikeTheAggregate(t *testing.T) {
	start := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	specs := map[string]domain.SpecInput{
		"untargeted":  {Name: "n", Command: "python", Args: []string{"a"}, Env: map[string]string{"K": "v"}, Labels: []string{"gpu:a100"}},
		"targeted":    {Name: "m", Command: "echo", MachineID: "m-9", MaxRetries: ptr(1)},
		"cooperative": {Name: "c", Command: "python", Checkpoint: new(true), Artifacts: []string{"out/*.pt"}},
		"by address":  {Name: "ip", Command: "echo", TargetMachines: nil, TargetIPs: []string{"10.0.0.9"}},
		"queued": {Name: "v", Type: domain.TypeVideo, Quota: "gu-1", Queue: "premium",
			Resources: map[string]string{"nvidia.com/gpu": "2"}, Video: &domain.Video{Model: "wan2.2-t2v", Type: "text_to_video",
				Prompt: "p", Resolution: "480P", Width: 832, Height: 480, Duration: 5, FrameNum: 81}},
		"queued behind a dependency": {Name: "d", Command: "echo", Queue: "standard", DependsOn: []string{"task-0"},
			Resources: map[string]string{"nvidia.com/gpu": "1"}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	steps := 0
	for name, in := range specs {
		spec, err := domain.NormalizeSpec(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cq := ""
		if in.Queue != "" {
			cq = "cq-" + in.Queue
		}
		for walk := range 20 {
			now := start
			task := domain.Fold(domain.Submit(now, "task-1", "tenant-a", "key-1", "req-1", "", spec, cq))
			for step := range 40 {
				now = now.Add(time.Duration(1+rng.IntN(90)) * time.Second)
				// Every possible next step is checked; the walk goes on
				// along one that keeps the task (a removal ends it).
				var options [][]domain.Record
				for _, cmd := range commands(task, spec, fmt.Sprint("att-", walk, "-", step)) {
					recs, err := cmd(now)
					if err != nil || len(recs) == 0 {
						continue
					}
					checkFold(t, name, task, recs)
					if !domain.Fold(recs).Deleted {
						options = append(options, recs)
					}
				}
				if len(options) == 0 {
					break
				}
				for _, r := range options[rng.IntN(len(options))] {
					task = domain.Apply(task, r)
				}
				steps++
			}
		}
	}
	if steps < 500 {
		t.Fatalf("only %d steps walked", steps)
	}
}

// checkFold compares both ways of applying recs to task, one record at a
// time.
func checkFold(t *testing.T, walk string, task domain.Task, recs []domain.Record) {
	t.Helper()
	for _, r := range recs {
		want := domain.Apply(task, r)
		got := domain.Apply(TaskFromProto(TaskToProto(task)), r)
		if w, g := TaskToProto(want), TaskToProto(got); !proto.Equal(w, g) {
			t.Fatalf("%s: %s on a %s task:\n aggregate %v\n rendered  %v", walk, r.Event.EventName(), task.Status, w, g)
		}
		task = want
	}
}

func ptr(i int) *int { return &i }

// commands are every command a task might receive next, with plausible
// arguments; most are refused in most states.
func commands(t domain.Task, spec domain.Spec, attempt string) []func(now time.Time) ([]domain.Record, error) {
	outcome := func(code int) func(now time.Time) ([]domain.Record, error) {
		return func(now time.Time) ([]domain.Record, error) {
			recs, _, err := t.Complete(now, t.AgentID, t.AttemptID, domain.Outcome{ExitCode: code,
				Result: &domain.Result{StorageType: "db", Stdout: fmt.Sprint("exit ", code), Stderr: "e"}})
			return recs, err
		}
	}
	changed := spec
	changed.Name, changed.MachineID, changed.Priority = "renamed", "", 2
	return []func(now time.Time) ([]domain.Record, error){
		func(now time.Time) ([]domain.Record, error) { return t.Update(now, "key-1", changed, t.ClusterQueue) },
		func(now time.Time) ([]domain.Record, error) { return t.Delete(now, "key-1") },
		func(now time.Time) ([]domain.Record, error) { return t.Cancel(now, "key-1", "not needed") },
		func(now time.Time) ([]domain.Record, error) { return t.Expire(now, "scheduler") },
		func(now time.Time) ([]domain.Record, error) { return t.Retry(now, "key-1") },
		func(now time.Time) ([]domain.Record, error) {
			return t.Lease(now.Add(time.Hour), attempt, "agent-1", "m-1", "claim-1")
		},
		func(now time.Time) ([]domain.Record, error) { return t.Start(now, t.AgentID, t.AttemptID) },
		func(now time.Time) ([]domain.Record, error) { return t.Renew(now, t.AgentID, t.AttemptID, 120) },
		func(now time.Time) ([]domain.Record, error) {
			return t.ReportProgress(now, t.AgentID, t.AttemptID, 42, "half")
		},
		outcome(0), outcome(3),
		func(now time.Time) ([]domain.Record, error) { return t.ExpireLease(now, domain.ReasonAgentLost) },
		func(now time.Time) ([]domain.Record, error) { return t.TimeOut(now) },
		func(now time.Time) ([]domain.Record, error) { return t.Preempt(now, "task-2", "priority") },
		func(now time.Time) ([]domain.Record, error) { return t.Suspend(now, "key-1", "pause") },
		func(now time.Time) ([]domain.Record, error) { return t.Requeue(now, "scheduler", "resume") },
		func(now time.Time) ([]domain.Record, error) { return t.Resume(now, "key-1") },
		func(now time.Time) ([]domain.Record, error) {
			return t.RecordCheckpoint(now, t.AgentID, t.AttemptID, "checkpoints/tenant-a/task-1/"+t.AttemptID+".tar.gz", 10, "ab")
		},
		func(now time.Time) ([]domain.Record, error) { return t.ReleaseForAdmission(now), nil },
		func(now time.Time) ([]domain.Record, error) {
			return t.Admit(now, t.AdmissionEpoch, t.ClusterQueue, map[string]string{"nvidia.com/gpu": "a100"}), nil
		},
		func(now time.Time) ([]domain.Record, error) {
			return t.Evict(now, t.AdmissionEpoch, "task-2", "reclaim"), nil
		},
	}
}

// A task shows its checkpoint setting whether or not it checkpoints: the
// documented default is {"enabled": false}, never a missing object.
func TestCheckpointShownForEveryTask(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, cooperative := range []bool{false, true} {
		spec, err := domain.NormalizeSpec(domain.SpecInput{Name: "n", Command: "echo", Checkpoint: &cooperative})
		if err != nil {
			t.Fatal(err)
		}
		p := TaskToProto(domain.Fold(domain.Submit(now, "task-1", "tenant-a", "key-1", "req-1", "", spec, "")))
		if p.GetCheckpoint() == nil || p.GetCheckpoint().GetEnabled() != cooperative || p.GetCheckpoint().GetKey() != "" {
			t.Errorf("checkpoint of a task with checkpoint %v: %v", cooperative, p.GetCheckpoint())
		}
	}
}
