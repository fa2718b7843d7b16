package codec

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	"github.com/taskmesh/taskmesh/services/scheduler/lifecycle/lifecycletest"
)

// Every event survives Encode then Decode unchanged: the property that
// lets the inline projection and the Kafka projections be rebuilt from the
// log and equal the live state.
func TestEveryEventRoundTrips(t *testing.T) {
	at := time.Date(2026, 11, 22, 12, 0, 0, 123456789, time.UTC)
	code := 7
	spec, err := domain.NormalizeSpec(domain.SpecInput{Name: "n", Command: "python", Args: []string{"a", "b"},
		Env: map[string]string{"K": "v"}, MachineID: "m1", DependsOn: []string{"d1"}, Labels: []string{"gpu:a100"}, Queue: "q",
		Webhook: "https://hooks.example.com/taskmesh?x=1"})
	if err != nil {
		t.Fatal(err)
	}
	scatter, err := domain.NormalizeSpec(domain.SpecInput{Name: "s", Type: "noop", Mode: domain.ModeScatter, ScatterCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	video, err := domain.NormalizeSpec(domain.SpecInput{Name: "v", Type: domain.TypeVideo, Quota: "gu-1",
		Resources: map[string]string{"nvidia.com/gpu": "2"}, Video: &domain.Video{Model: "wan2.2-i2v", Type: "image_to_video",
			Prompt: "p", NegativePrompt: "n", PromptExtend: true, ActualPrompt: "ap", ImageURL: "https://x/i.png",
			ImageObjectKey: "k", Resolution: "720P", Width: 1280, Height: 720, Duration: 5, FrameNum: 81, Seed: 9, Watermark: true}})
	if err != nil {
		t.Fatal(err)
	}
	ipSpec := spec
	ipSpec.MachineID, ipSpec.TargetIP = "", "10.0.0.9"
	result := &domain.Result{StorageType: "s3", Stdout: "out", Stderr: "err", ObjectKey: "results/t/x/a.json", SizeBytes: 9, SHA256: "ab",
		Artifacts: []domain.Artifact{{Path: "out/model.pt", Key: "artifacts/t/x/a/out/model.pt", Size: 5, SHA256: "cd"}}}
	coop := spec
	coop.Checkpoint, coop.Artifacts = true, []string{"out/*.pt"}
	events := []domain.Event{
		domain.Submitted{ID: "task-1", TenantID: "t", CreatedBy: "key-1", RequestID: "r", FanoutID: "f", Spec: spec},
		domain.Submitted{ID: "task-1", TenantID: "t", CreatedBy: "key-1", Spec: scatter},
		domain.Submitted{ID: "task-1", TenantID: "t", CreatedBy: "key-1", Spec: ipSpec},
		domain.Submitted{ID: "task-1", TenantID: "t", CreatedBy: "key-1", Spec: coop},
		domain.Submitted{ID: "task-1", TenantID: "t", CreatedBy: "key-1", Spec: video, ClusterQueue: "tenant-high-priority-queue"},
		domain.Updated{Spec: video, ClusterQueue: "gu-1"},
		domain.Updated{Spec: spec},
		domain.Submitted{ID: "task-1", TenantID: "t", CreatedBy: "key-1", Spec: spec, ClusterQueue: "cq", HeldForDependencies: true},
		domain.Updated{Spec: spec, ClusterQueue: "cq", HeldForDependencies: true},
		domain.DependenciesMet{Spec: video, ClusterQueue: "cq"},
		domain.Admitted{Queue: "premium", ClusterQueue: "cq", Flavors: map[string]string{"gpu": "a100"}},
		domain.Leased{AttemptID: "a", AgentID: "ag", MachineID: "m", ClaimRequestID: "c", LeaseExpiresAt: at},
		domain.Started{AttemptID: "a", MachineID: "m", LeaseExpiresAt: at},
		domain.Progressed{AttemptID: "a", Progress: 42, Message: "half"},
		domain.LeaseRenewed{AttemptID: "a", LeaseExpiresAt: at},
		domain.Succeeded{AttemptID: "a", MachineID: "m", ExitCode: 0, Result: result, EndedAt: at},
		domain.Failed{AttemptID: "a", MachineID: "m", ExitCode: &code, Error: "boom", Reason: "exit_code", Result: result, EndedAt: at},
		domain.Failed{AttemptID: "a", Error: "spawn", Reason: "spawn_error", EndedAt: at},
		domain.Failed{AttemptID: "a", Error: "again", Reason: "error", EndedAt: at, RetryFollows: true},
		domain.RetryScheduled{RetryCount: 2, RetryAt: at, Manual: true},
		domain.LeaseExpired{AttemptID: "a", AgentID: "ag", Reason: "agent_lost", RetryCount: 1, Failed: true},
		domain.Preempted{AttemptID: "a", MachineID: "m", By: "b", Reason: "r"},
		domain.Suspended{AttemptID: "a", Reason: "r"},
		domain.Checkpointed{AttemptID: "a", Key: "checkpoints/t/task-1/a.tar.gz", SizeBytes: 7, SHA256: "ef"},
		domain.Requeued{From: "preempted", Reason: "r"},
		domain.Canceled{Reason: "r", AttemptID: "a"},
		domain.Deleted{},
		domain.Expired{},
	}
	for _, e := range events {
		in := domain.Record{Event: e, At: at, Actor: "key-1", IP: "203.0.113.7"}
		payload, err := Marshal("ev-1", "task-1", "t", 3, in, map[string]string{"traceparent": "00-x"})
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		env, out, err := Unmarshal(payload)
		if err != nil {
			t.Fatalf("%T: %v", e, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("%T round trip:\n in  %+v\n out %+v", e, in, out)
		}
		if env.GetVersion() != 3 || env.GetAggregateId() != "task-1" || env.GetTraceContext()["traceparent"] != "00-x" {
			t.Errorf("%T envelope = %v", e, env)
		}
	}
}

func TestUnknownPayloadIsAnError(t *testing.T) {
	if _, _, err := Unmarshal([]byte{0xff, 0x01}); err == nil {
		t.Fatal("garbage decoded")
	}
	payload, _ := Marshal("e", "t", "x", 1, domain.Record{Event: domain.Deleted{}, At: time.Now()}, nil)
	env, _, _ := Unmarshal(payload)
	env.Event = nil
	if _, err := Record(env); err == nil {
		t.Fatal("an envelope without an event decoded")
	}
}

// The codec and the fold have a case for every event of the TaskEvent
// oneof: decoding gives a domain event Apply folds, and encoding it again
// gives the same oneof case.
func TestLifecycleCoverage(t *testing.T) {
	lifecycletest.EveryEvent(t, "the codec (Record and Envelope) or the fold (domain.Apply)", func(ev *taskv1.TaskEvent) error {
		r, err := Record(ev)
		if err != nil {
			return err
		}
		if !domain.Handles(r.Event) {
			return fmt.Errorf("domain.Apply has no case for %s", r.Event.EventName())
		}
		back, err := Envelope(ev.GetEventId(), ev.GetAggregateId(), ev.GetTenantId(), ev.GetVersion(), r, nil)
		if err != nil {
			return err
		}
		if got, want := lifecycletest.Case(back), lifecycletest.Case(ev); got != want {
			return fmt.Errorf("encodes back as %q", got)
		}
		return nil
	})
}
