package taskproto

import (
	"slices"
	"testing"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// An update's mask names TaskTemplate fields by their proto names, and the
// template update knows each one: a field added to the message and not to
// the update fails here.
func TestTemplateFieldsAreTaskTemplates(t *testing.T) {
	var names []string
	fields := (&taskv1.TaskTemplate{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		names = append(names, string(fields.Get(i).Name()))
	}
	slices.Sort(names)
	known := slices.Sorted(slices.Values(orch.TemplateFields))
	if !slices.Equal(names, known) {
		t.Errorf("TaskTemplate has %v, the template update knows %v", names, known)
	}
}
