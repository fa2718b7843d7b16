package kafka

import (
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// The topic names are part of the event contract: renaming one strands
// every consumer, so they are pinned here.
func TestEnvelopeTopic(t *testing.T) {
	if got := EnvelopeTopic(&taskv1.TaskEvent{}); got != "taskmesh.task.events.v1" {
		t.Errorf("TaskEvent topic = %q", got)
	}
	if got := EnvelopeTopic(&quotav1.QuotaEvent{}); got != "taskmesh.quota.events.v1" {
		t.Errorf("QuotaEvent topic = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("a message without a topic did not panic")
		}
	}()
	EnvelopeTopic(&timestamppb.Timestamp{})
}
