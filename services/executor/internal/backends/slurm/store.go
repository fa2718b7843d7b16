package slurm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// attemptStore keeps, per attempt this backend holds, the task as it was
// claimed. Slurm is where the backend's jobs are found after a restart
// (by their comment), but it keeps no copy of the task's command: without
// this record, a placement whose placeholder was still pending when the
// backend stopped could not hand the task to the node's agent later. A
// record is written before the job is submitted and removed once the
// outcome is delivered (or the server took the attempt away), so a
// record whose job has ended means "outcome not yet delivered".
//
// With no directory configured, nothing is kept: a restarted backend then
// fails such attempts (the scheduler retries them) rather than guess.
type attemptStore struct{ dir string }

type attemptRecord struct {
	Task  json.RawMessage `json:"task"`
	JobID int64           `json:"job_id,omitempty"`
}

func (s attemptStore) path(attemptID string) string {
	return filepath.Join(s.dir, attemptID+".json")
}

// validAttemptID keeps ids that could name files elsewhere out.
func validAttemptID(id string) bool {
	return id != "" && !strings.ContainsAny(id, "/\\") && id != "." && id != ".."
}

func (s attemptStore) save(t *taskv1.Task, jobID int64) error {
	if s.dir == "" {
		return nil
	}
	if !validAttemptID(t.GetAttemptId()) {
		return fmt.Errorf("attempt id %q cannot name a file", t.GetAttemptId())
	}
	raw, err := protojson.Marshal(t)
	if err != nil {
		return err
	}
	body, err := json.Marshal(attemptRecord{Task: raw, JobID: jobID})
	if err != nil {
		return err
	}
	tmp := s.path(t.GetAttemptId()) + ".tmp"
	if err := os.WriteFile(tmp, body, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path(t.GetAttemptId()))
}

// load returns the claimed task and its job id (0: not yet known).
func (s attemptStore) load(attemptID string) (*taskv1.Task, int64, bool) {
	if s.dir == "" || !validAttemptID(attemptID) {
		return nil, 0, false
	}
	raw, err := os.ReadFile(s.path(attemptID))
	if err != nil {
		return nil, 0, false
	}
	var rec attemptRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, 0, false
	}
	var t taskv1.Task
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(rec.Task, &t); err != nil {
		return nil, 0, false
	}
	return &t, rec.JobID, true
}

func (s attemptStore) remove(attemptID string) {
	if s.dir == "" || !validAttemptID(attemptID) {
		return
	}
	// A record left behind only costs an idempotent report after a restart.
	_ = os.Remove(s.path(attemptID))
}

// attempts lists the attempts with a record.
func (s attemptStore) attempts() []string {
	if s.dir == "" {
		return nil
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			out = append(out, id)
		}
	}
	return out
}
