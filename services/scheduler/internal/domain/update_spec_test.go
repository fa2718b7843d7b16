package domain

import (
	"errors"
	"slices"
	"testing"
)

// An update keeps what it does not name: the artifacts, the checkpoint
// setting and the target address a fan-out gave the task included.
func TestUpdatedSpecKeepsWhatItLeavesOut(t *testing.T) {
	cur := spec(t, func(in *SpecInput) {
		in.Artifacts, in.Checkpoint = []string{"out/*.pt"}, new(true)
	})
	cur.TargetIP = "10.0.0.9" // as targets.ips gives it
	got, err := UpdatedSpec(cur, SpecInput{Priority: ptr(2)})
	if err != nil {
		t.Fatal(err)
	}
	if got.Priority != 2 || !got.Checkpoint || !slices.Equal(got.Artifacts, []string{"out/*.pt"}) || got.TargetIP != "10.0.0.9" {
		t.Errorf("after a priority update: %+v", got)
	}
	// What an update names, it changes: a checkpoint object even when it
	// turns checkpointing off.
	got, err = UpdatedSpec(got, SpecInput{Checkpoint: new(false), Artifacts: []string{"metrics.json"}})
	if err != nil || got.Checkpoint || !slices.Equal(got.Artifacts, []string{"metrics.json"}) {
		t.Errorf("checkpoint off, new artifacts: %+v, %v", got, err)
	}
	if got, err = UpdatedSpec(got, SpecInput{Checkpoint: new(true)}); err != nil || !got.Checkpoint {
		t.Errorf("checkpoint on: %+v, %v", got, err)
	}
	_, err = UpdatedSpec(got, SpecInput{Artifacts: []string{"../escape"}})
	wantInvalidField(t, "artifact outside the working directory", err, "artifacts")
}

// A broadcast's task names its mode and its machine; updating anything
// else of it works, and sending it back as read changes nothing.
func TestUpdatedSpecOfABroadcastTask(t *testing.T) {
	cur := spec(t, func(in *SpecInput) { in.Mode, in.Labels = ModeBroadcast, []string{"gpu"} })
	cur.MachineID = "m-1" // as the broadcast gave it
	got, err := UpdatedSpec(cur, SpecInput{Priority: ptr(1)})
	if err != nil || got.Priority != 1 || got.Mode != ModeBroadcast || got.MachineID != "m-1" || !slices.Equal(got.Labels, []string{"gpu"}) {
		t.Errorf("update of a broadcast's task = %+v, %v", got, err)
	}
	if _, err := UpdatedSpec(cur, SpecInput{Mode: ModeBroadcast, MachineID: "m-1", Name: "renamed"}); err != nil {
		t.Errorf("the task sent back as read: %v", err)
	}
	_, err = UpdatedSpec(cur, SpecInput{MachineID: "m-2"})
	wantInvalidField(t, "another machine for a broadcast's task", err, "machine_id")
}

// An update changes one task: it cannot fan out or change the mode the
// task was created with.
func TestUpdatedSpecRefusesAFanOut(t *testing.T) {
	single := spec(t, nil)
	scatter := spec(t, func(in *SpecInput) { in.Mode, in.ScatterCount = ModeScatter, 3 })
	grouped := spec(t, func(in *SpecInput) { in.GroupID = "g-1" })
	for name, tt := range map[string]struct {
		cur   Spec
		in    SpecInput
		field string
	}{
		"targets":           {single, SpecInput{TargetMachines: []string{"m-1", "m-2"}}, "targets"},
		"target ips":        {single, SpecInput{TargetIPs: []string{"10.0.0.1"}}, "targets"},
		"repeat_count":      {single, SpecInput{Repeat: 3}, "repeat_count"},
		"to broadcast":      {single, SpecInput{Mode: ModeBroadcast}, "distribution.mode"},
		"to scatter":        {single, SpecInput{Mode: ModeScatter, ScatterCount: 2}, "distribution.mode"},
		"scatter to single": {scatter, SpecInput{Mode: ModeSingle}, "distribution.mode"},
		"scatter count":     {scatter, SpecInput{ScatterCount: 5}, "distribution.count"},
		"out of its group":  {grouped, SpecInput{GroupID: "g-2"}, "group_id"},
	} {
		_, err := UpdatedSpec(tt.cur, tt.in)
		wantInvalidField(t, name, err, tt.field)
	}
	if got, err := UpdatedSpec(scatter, SpecInput{Mode: ModeScatter, ScatterCount: 3, Priority: ptr(9)}); err != nil || got.Priority != 9 {
		t.Errorf("a scatter's task sent back as read: %+v, %v", got, err)
	}
	if got, err := UpdatedSpec(single, SpecInput{Repeat: 1, MachineID: "m-7"}); err != nil || got.MachineID != "m-7" {
		t.Errorf("repeat_count 1 and a new machine: %+v, %v", got, err)
	}
	if got, err := UpdatedSpec(grouped, SpecInput{GroupID: "g-1", Priority: ptr(9)}); err != nil || got.GroupID != "g-1" || got.Priority != 9 {
		t.Errorf("a member sent back with its own group: %+v, %v", got, err)
	}
	if got, err := UpdatedSpec(single, SpecInput{GroupID: "g-3"}); err != nil || got.GroupID != "g-3" {
		t.Errorf("a task given a group: %+v, %v", got, err)
	}
}

func wantInvalidField(t *testing.T, what string, err error, field string) {
	t.Helper()
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Field != field || !errors.Is(err, ErrInvalid) {
		t.Errorf("%s: err = %v, want invalid %s", what, err, field)
	}
}

// An update clears the lists and maps it names as cleared and gives
// empty; the ones it gives empty without naming them keep their value,
// and a path that names no list or map is refused.
func TestUpdatedSpecClearsTheListsItNames(t *testing.T) {
	cur := spec(t, func(in *SpecInput) {
		in.Args, in.Env, in.Artifacts = []string{"-v"}, map[string]string{"A": "1"}, []string{"out/*"}
		in.Labels, in.Resources = []string{"gpu"}, map[string]string{"cpu": "2"}
	})
	cur.DependsOn = []string{"t0"}
	kept, err := UpdatedSpec(cur, SpecInput{Priority: ptr(3)})
	if err != nil || len(kept.Args) != 1 || len(kept.Env) != 1 || len(kept.DependsOn) != 1 || len(kept.Artifacts) != 1 ||
		len(kept.Labels) != 1 || len(kept.Resources) != 1 {
		t.Fatalf("an update naming nothing: %+v, %v", kept, err)
	}
	in := SpecInput{Env: map[string]string{"B": "2"}}
	if err := in.Clear([]string{"args", "env", "depends_on", "distribution.labels", "artifacts", "resources"}); err != nil {
		t.Fatal(err)
	}
	got, err := UpdatedSpec(cur, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Args) != 0 || got.Env["B"] != "2" || len(got.Env) != 1 || len(got.DependsOn) != 0 || len(got.Artifacts) != 0 ||
		len(got.Labels) != 0 || len(got.Resources) != 0 {
		t.Errorf("after clearing every list (env given anew): %+v", got)
	}
	// A command line with its args cleared brings its own arguments.
	in = SpecInput{Command: "python train.py --epochs 3"}
	_ = in.Clear([]string{"args"})
	if got, err := UpdatedSpec(cur, in); err != nil || got.Command != "python" || !slices.Equal(got.Args, []string{"train.py", "--epochs", "3"}) {
		t.Errorf("a new command line, args cleared: %q %q, %v", got.Command, got.Args, err)
	}
	// Strings: an emptied workdir or webhook is cleared; an emptied name
	// or command is refused as on create; one given empty unnamed keeps
	// its value.
	cur.Workdir, cur.Webhook = "/work", "https://hooks.example.com/t"
	in = SpecInput{}
	_ = in.Clear([]string{"workdir", "webhook"})
	if got, err := UpdatedSpec(cur, in); err != nil || got.Workdir != "" || got.Webhook != "" || got.Name != cur.Name {
		t.Errorf("workdir and webhook emptied: %q %q %q, %v", got.Workdir, got.Webhook, got.Name, err)
	}
	if got, err := UpdatedSpec(cur, SpecInput{}); err != nil || got.Workdir != "/work" || got.Webhook != cur.Webhook {
		t.Errorf("nothing named: %q %q, %v", got.Workdir, got.Webhook, err)
	}
	for _, field := range []string{"name", "command"} {
		in = SpecInput{}
		_ = in.Clear([]string{field})
		_, err := UpdatedSpec(cur, in)
		wantInvalidField(t, "an emptied "+field, err, field)
	}
	in = SpecInput{}
	err = in.Clear([]string{"args", "priority"})
	wantInvalidField(t, "a mask naming a number", err, "update_mask")
	if in.Args != nil {
		t.Errorf("a refused mask changed the input: %+v", in)
	}
}
