package bench

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// recovery: agent A takes a task (lease_ttl_sec 300) and stops
// heartbeating, as a SIGKILLed agent would; agent B keeps heartbeating
// every 5 s and long-polls. Returns the time from A's last sign of life
// to B holding the task. With the scheduler's production timing that is
// AgentLostAfter (15 s) plus up to one sweep interval (1 s), then B's
// claim being woken.
func recovery(ctx context.Context, s *schedulerUnderTest) (time.Duration, error) {
	resp, err := s.tasks.CreateTask(asUser(ctx), &taskv1.CreateTaskRequest{Spec: &taskv1.TaskSpec{Name: "victim", Command: "sleep",
		Args: []string{"3600"}, LeaseTtlSec: ptr32(300)}})
	if err != nil {
		return 0, err
	}
	id := resp.GetTask().GetId()
	a := asAgent(ctx, "doomed-agent")
	claimed, err := s.leases.ClaimTasks(a, &taskv1.ClaimTasksRequest{AgentId: "doomed-agent", MachineId: "m-doomed", Limit: 1})
	if err != nil || len(claimed.GetTasks()) != 1 {
		return 0, fmt.Errorf("doomed agent claim: %v %v", claimed, err)
	}
	t := claimed.GetTasks()[0]
	if _, err := s.leases.StartTask(a, &taskv1.StartTaskRequest{TaskId: id, AgentId: "doomed-agent", AttemptId: t.GetAttemptId()}); err != nil {
		return 0, err
	}
	if _, err := s.leases.SendHeartbeat(a, &taskv1.SendHeartbeatRequest{AgentId: "doomed-agent", MachineId: "m-doomed", AttemptIds: []string{t.GetAttemptId()}}); err != nil {
		return 0, err
	}
	died := time.Now() // last sign of life
	b := asAgent(ctx, "rescuer")
	beat := time.NewTicker(5 * time.Second)
	defer beat.Stop()
	for time.Since(died) < 2*time.Minute {
		select {
		case <-beat.C:
			_, _ = s.leases.SendHeartbeat(b, &taskv1.SendHeartbeatRequest{AgentId: "rescuer", MachineId: "m-rescuer", FreeSlots: 1})
		default:
		}
		got, err := s.leases.ClaimTasks(b, &taskv1.ClaimTasksRequest{AgentId: "rescuer", MachineId: "m-rescuer", Limit: 1, Wait: durationpb.New(time.Second)})
		if err != nil {
			return 0, err
		}
		if len(got.GetTasks()) == 1 && got.GetTasks()[0].GetId() == id {
			return time.Since(died), nil
		}
	}
	return 0, fmt.Errorf("the task was not leased again within 2 minutes")
}
