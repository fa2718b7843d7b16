package live

import (
	"encoding/json"
	"testing"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
)

// A group frame shows the group as GET /api/v1/task-groups/{id} does: a
// member without an outcome has "exit_code": null, not a missing key.
func TestGroupFrameShowsAnUnsetExitCodeAsNull(t *testing.T) {
	code := int32(0)
	raw, err := groupFrame(&taskv1.TaskGroup{Id: "g", Tasks: []*taskv1.TaskGroupMember{
		{Id: "a", Status: "pending"}, {Id: "b", Status: "completed", ExitCode: &code}}}, true, false)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Change string                       `json:"change"`
		Tasks  []map[string]json.RawMessage `json:"tasks"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Tasks) != 2 || f.Change != "snapshot" {
		t.Fatalf("frame = %s", raw)
	}
	if v, ok := f.Tasks[0]["exit_code"]; !ok || string(v) != "null" {
		t.Errorf("pending member's exit_code = %q (present %v), want null", v, ok)
	}
	if v := f.Tasks[1]["exit_code"]; string(v) != "0" {
		t.Errorf("completed member's exit_code = %q, want 0", v)
	}
}
