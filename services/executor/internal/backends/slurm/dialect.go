package slurm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// dialect is one family of slurmrestd's REST API: the paths and the JSON
// shapes of the calls the backend makes. v0.0.38 (Slurm 22.05) and
// v0.0.40 and later (Slurm 23.11 on) differ in how they spell numbers that
// may be unset ({"set","number"} objects from v0.0.40), the environment
// (a map, then a list of NAME=value), GPUs (gres, then tres_per_node),
// job states (a string, then a list of the state and its flags) and exit
// codes (a wait status, then an object).
type dialect interface {
	// Version is the path segment, e.g. "v0.0.38".
	Version() string
	submitBody(JobSpec) any
	// zeroTimeLimitBody is the update that cuts a job's time limit to
	// nothing, so that slurmctld ends it as TIMEOUT at its next check; nil
	// when the version cannot say it (v0.0.38 reads 0 as INFINITE).
	zeroTimeLimitBody() any
	// jobsPath lists every job slurmctld knows.
	jobsPath() string
	decodeJobs(raw []byte) ([]Job, error)
}

// dialectFor returns the dialect of a version ("v0.0.38", "v0.0.40", …).
func dialectFor(version string) (dialect, error) {
	n, ok := versionNumber(version)
	switch {
	case !ok:
		return nil, fmt.Errorf("slurm REST version %q: want v0.0.38 or v0.0.40 and later", version)
	case n == 38:
		return v0038{}, nil
	case n >= 40:
		return v0040{version: version}, nil
	}
	return nil, fmt.Errorf("slurm REST version %s is not supported: want v0.0.38 or v0.0.40 and later", version)
}

var versionPattern = regexp.MustCompile(`^v0\.0\.(\d+)$`)

func versionNumber(v string) (int, bool) {
	m := versionPattern.FindStringSubmatch(v)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

// submitPathPattern finds the versions an OpenAPI document offers.
var submitPathPattern = regexp.MustCompile(`^/slurm/(v0\.0\.\d+)/job/submit$`)

// pickVersion chooses the newest supported version among the paths of
// slurmrestd's OpenAPI document.
func pickVersion(paths []string) (string, error) {
	var found []int
	for _, p := range paths {
		if m := submitPathPattern.FindStringSubmatch(p); m != nil {
			if n, ok := versionNumber(m[1]); ok && (n == 38 || n >= 40) {
				found = append(found, n)
			}
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("slurmrestd offers no supported job API (v0.0.38, v0.0.40 and later) among %d paths", len(paths))
	}
	sort.Ints(found)
	return fmt.Sprintf("v0.0.%d", found[len(found)-1]), nil
}

// restError is an entry of a response's "errors" (same fields in every
// version).
type restError struct {
	Description string `json:"description"`
	ErrorNumber int    `json:"error_number"`
	// ErrorCode is v0.0.38's name of the number in job submission answers.
	ErrorCode int    `json:"error_code"`
	Error     string `json:"error"`
	Source    string `json:"source"`
}

// number is Slurm's error number, whichever field carried it.
func (e restError) number() int {
	if e.ErrorNumber != 0 {
		return e.ErrorNumber
	}
	return e.ErrorCode
}

// envelope is what every response carries besides its payload.
type envelope struct {
	Errors []restError `json:"errors"`
}

// ---- v0.0.38 -------------------------------------------------------------

type v0038 struct{}

func (v0038) Version() string  { return "v0.0.38" }
func (v0038) jobsPath() string { return "/slurm/v0.0.38/jobs" }

type v0038Job struct {
	Name                    string            `json:"name"`
	Comment                 string            `json:"comment,omitempty"`
	Partition               string            `json:"partition,omitempty"`
	CurrentWorkingDirectory string            `json:"current_working_directory"`
	Environment             map[string]string `json:"environment"`
	CPUsPerTask             int               `json:"cpus_per_task,omitempty"`
	MemoryPerNode           int64             `json:"memory_per_node,omitempty"`
	Gres                    string            `json:"gres,omitempty"`
	TimeLimit               int               `json:"time_limit"`
	Nice                    int               `json:"nice,omitempty"`
	// v0.0.38 spells a requested priority as a string.
	Priority       string `json:"priority,omitempty"`
	QoS            string `json:"qos,omitempty"`
	StandardOutput string `json:"standard_output,omitempty"`
	StandardError  string `json:"standard_error,omitempty"`
	Requeue        bool   `json:"requeue"`
}

func (v0038) submitBody(s JobSpec) any {
	j := v0038Job{
		Name: s.Name, Comment: s.Comment, Partition: s.Partition, CurrentWorkingDirectory: s.WorkDir,
		Environment: s.Env, CPUsPerTask: s.CPUs, MemoryPerNode: s.MemoryMB, TimeLimit: s.TimeLimitMin,
		Nice: s.Nice, QoS: s.QoS, StandardOutput: s.StdoutPath, StandardError: s.StderrPath,
	}
	if j.Environment == nil {
		j.Environment = map[string]string{}
	}
	if s.GPUs > 0 {
		j.Gres = "gpu:" + strconv.Itoa(s.GPUs)
	}
	if s.Priority > 0 {
		j.Priority = strconv.Itoa(s.Priority)
	}
	// The script goes beside the job in v0.0.38. Its argv field is never
	// used: slurmrestd 22.05 crashes on it.
	return struct {
		Job    v0038Job `json:"job"`
		Script string   `json:"script"`
	}{j, s.Script}
}

func (v0038) zeroTimeLimitBody() any { return nil }

type v0038JobInfo struct {
	JobID            int64    `json:"job_id"`
	Name             string   `json:"name"`
	Comment          string   `json:"comment"`
	JobState         string   `json:"job_state"`
	StateReason      string   `json:"state_reason"`
	StateDescription string   `json:"state_description"`
	Nodes            string   `json:"nodes"`
	GresDetail       []string `json:"gres_detail"`
	// ExitCode is the batch script's wait status: code << 8 | signal.
	ExitCode       int64  `json:"exit_code"`
	BatchHost      string `json:"batch_host"`
	StartTime      int64  `json:"start_time"`
	SubmitTime     int64  `json:"submit_time"`
	StandardOutput string `json:"standard_output"`
	StandardError  string `json:"standard_error"`
	UserName       string `json:"user_name"`
	QoS            string `json:"qos"`
	Priority       int64  `json:"priority"`
}

func (v0038) decodeJobs(raw []byte) ([]Job, error) {
	var resp struct {
		Jobs []v0038JobInfo `json:"jobs"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("decode jobs (v0.0.38): %w", err)
	}
	out := make([]Job, 0, len(resp.Jobs))
	for _, j := range resp.Jobs {
		state, completing := normalizeState([]string{j.JobState})
		out = append(out, Job{
			ID: j.JobID, Name: j.Name, Comment: j.Comment, State: state, Completing: completing,
			Reason: j.StateReason, Description: j.StateDescription, Nodes: j.Nodes, GRES: j.GresDetail,
			ExitCode: int(j.ExitCode>>8) & 0xff, Signal: int(j.ExitCode & 0x7f),
			StartTime: unixTime(j.StartTime), SubmitTime: unixTime(j.SubmitTime),
			StdoutPath: j.StandardOutput, StderrPath: j.StandardError, User: j.UserName, QoS: j.QoS, Priority: j.Priority,
			BatchHost: j.BatchHost,
		})
	}
	return out, nil
}

// ---- v0.0.40 and later ---------------------------------------------------

type v0040 struct{ version string }

func (d v0040) Version() string  { return d.version }
func (d v0040) jobsPath() string { return "/slurm/" + d.version + "/jobs/" }

// noVal is v0.0.40's number that may be unset or infinite.
type noVal struct {
	Set      bool  `json:"set"`
	Infinite bool  `json:"infinite"`
	Number   int64 `json:"number"`
}

func setNumber(n int64) *noVal { return &noVal{Set: true, Number: n} }

func (v *noVal) value() (int64, bool) {
	if v == nil || !v.Set || v.Infinite {
		return 0, false
	}
	return v.Number, true
}

type v0040Job struct {
	Name                    string   `json:"name"`
	Comment                 string   `json:"comment,omitempty"`
	Partition               string   `json:"partition,omitempty"`
	CurrentWorkingDirectory string   `json:"current_working_directory"`
	Environment             []string `json:"environment"`
	CPUsPerTask             int      `json:"cpus_per_task,omitempty"`
	MemoryPerNode           *noVal   `json:"memory_per_node,omitempty"`
	TresPerNode             string   `json:"tres_per_node,omitempty"`
	TimeLimit               *noVal   `json:"time_limit"`
	Nice                    int      `json:"nice,omitempty"`
	Priority                *noVal   `json:"priority,omitempty"`
	QoS                     string   `json:"qos,omitempty"`
	StandardOutput          string   `json:"standard_output,omitempty"`
	StandardError           string   `json:"standard_error,omitempty"`
	Requeue                 bool     `json:"requeue"`
	Script                  string   `json:"script"`
}

func (d v0040) submitBody(s JobSpec) any {
	env := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env) // a stable request: the same spec, the same bytes
	j := v0040Job{
		Name: s.Name, Comment: s.Comment, Partition: s.Partition, CurrentWorkingDirectory: s.WorkDir,
		Environment: env, CPUsPerTask: s.CPUs, TimeLimit: setNumber(int64(s.TimeLimitMin)),
		Nice: s.Nice, QoS: s.QoS, StandardOutput: s.StdoutPath, StandardError: s.StderrPath, Script: s.Script,
	}
	if s.MemoryMB > 0 {
		j.MemoryPerNode = setNumber(s.MemoryMB)
	}
	if s.GPUs > 0 {
		j.TresPerNode = "gres/gpu:" + strconv.Itoa(s.GPUs)
	}
	if s.Priority > 0 {
		j.Priority = setNumber(int64(s.Priority))
	}
	return struct {
		Job v0040Job `json:"job"`
	}{j}
}

func (d v0040) zeroTimeLimitBody() any {
	return map[string]*noVal{"time_limit": setNumber(0)}
}

type v0040JobInfo struct {
	JobID            int64    `json:"job_id"`
	Name             string   `json:"name"`
	Comment          string   `json:"comment"`
	JobState         []string `json:"job_state"`
	StateReason      string   `json:"state_reason"`
	StateDescription string   `json:"state_description"`
	Nodes            string   `json:"nodes"`
	GresDetail       []string `json:"gres_detail"`
	ExitCode         *struct {
		Status     []string `json:"status"`
		ReturnCode *noVal   `json:"return_code"`
		Signal     *struct {
			ID   *noVal `json:"id"`
			Name string `json:"name"`
		} `json:"signal"`
	} `json:"exit_code"`
	BatchHost      string `json:"batch_host"`
	StartTime      *noVal `json:"start_time"`
	SubmitTime     *noVal `json:"submit_time"`
	StandardOutput string `json:"standard_output"`
	StandardError  string `json:"standard_error"`
	UserName       string `json:"user_name"`
	QoS            string `json:"qos"`
	Priority       *noVal `json:"priority"`
}

func (d v0040) decodeJobs(raw []byte) ([]Job, error) {
	var resp struct {
		Jobs []v0040JobInfo `json:"jobs"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("decode jobs (%s): %w", d.version, err)
	}
	out := make([]Job, 0, len(resp.Jobs))
	for _, j := range resp.Jobs {
		state, completing := normalizeState(j.JobState)
		job := Job{
			ID: j.JobID, Name: j.Name, Comment: j.Comment, State: state, Completing: completing,
			Reason: j.StateReason, Description: j.StateDescription, Nodes: j.Nodes, GRES: j.GresDetail,
			StdoutPath: j.StandardOutput, StderrPath: j.StandardError, User: j.UserName, QoS: j.QoS,
			BatchHost: j.BatchHost,
		}
		if n, ok := j.StartTime.value(); ok {
			job.StartTime = unixTime(n)
		}
		if n, ok := j.SubmitTime.value(); ok {
			job.SubmitTime = unixTime(n)
		}
		if n, ok := j.Priority.value(); ok {
			job.Priority = n
		}
		if e := j.ExitCode; e != nil {
			if n, ok := e.ReturnCode.value(); ok {
				job.ExitCode = int(n)
			}
			if e.Signal != nil {
				if n, ok := e.Signal.ID.value(); ok {
					job.Signal = int(n)
				}
			}
		}
		out = append(out, job)
	}
	return out, nil
}

func unixTime(sec int64) time.Time {
	if sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0)
}
