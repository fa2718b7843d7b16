package slurm

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// spec sets every field a submission can carry.
var fullSpec = JobSpec{
	Name: "tm-t1", Comment: "taskmesh:agent=a&attempt=x&mode=batch&task=t1", Partition: "gpu", WorkDir: "/shared/jobs",
	Env: map[string]string{"PATH": "/bin", "A": "1"}, Script: "#!/bin/sh\nexec 'true'\n",
	CPUs: 4, MemoryMB: 8192, GPUs: 2, TimeLimitMin: 61, Nice: 300, Priority: 0, QoS: "high",
	StdoutPath: "/shared/jobs/out/x.out", StderrPath: "/shared/jobs/out/x.err",
}

// Job fields of each version's OpenAPI schema the backend may send
// (v0.0.38_job_properties; v0.0.40_job_desc_msg, the same through
// v0.0.44): a name outside these is a typo slurmrestd would reject.
var schemaFields = map[string][]string{
	"v0.0.38": {"comment", "cpus_per_task", "current_working_directory", "environment", "gres", "memory_per_node",
		"name", "nice", "partition", "priority", "qos", "requeue", "standard_error", "standard_output", "time_limit"},
	"v0.0.40": {"comment", "cpus_per_task", "current_working_directory", "environment", "memory_per_node", "name",
		"nice", "partition", "priority", "qos", "requeue", "script", "standard_error", "standard_output", "time_limit",
		"tres_per_node"},
}

// The submission of each version, as slurmrestd's schema spells it.
func TestSubmitBodiesHaveEachVersionsShape(t *testing.T) {
	tests := []struct {
		version string
		want    string
	}{
		{"v0.0.38", `{"job":{"name":"tm-t1","comment":"taskmesh:agent=a\u0026attempt=x\u0026mode=batch\u0026task=t1","partition":"gpu",` +
			`"current_working_directory":"/shared/jobs","environment":{"A":"1","PATH":"/bin"},"cpus_per_task":4,"memory_per_node":8192,` +
			`"gres":"gpu:2","time_limit":61,"nice":300,"qos":"high","standard_output":"/shared/jobs/out/x.out",` +
			`"standard_error":"/shared/jobs/out/x.err","requeue":false},"script":"#!/bin/sh\nexec 'true'\n"}`},
		{"v0.0.40", `{"job":{"name":"tm-t1","comment":"taskmesh:agent=a\u0026attempt=x\u0026mode=batch\u0026task=t1","partition":"gpu",` +
			`"current_working_directory":"/shared/jobs","environment":["A=1","PATH=/bin"],"cpus_per_task":4,` +
			`"memory_per_node":{"set":true,"infinite":false,"number":8192},"tres_per_node":"gres/gpu:2",` +
			`"time_limit":{"set":true,"infinite":false,"number":61},"nice":300,"qos":"high","standard_output":"/shared/jobs/out/x.out",` +
			`"standard_error":"/shared/jobs/out/x.err","requeue":false,"script":"#!/bin/sh\nexec 'true'\n"}}`},
		{"v0.0.44", ""}, // the v0.0.40 shape
	}
	for _, tt := range tests {
		d, err := dialectFor(tt.version)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(d.submitBody(fullSpec))
		if err != nil {
			t.Fatal(err)
		}
		if tt.want != "" && string(raw) != tt.want {
			t.Errorf("%s submission\n got %s\nwant %s", tt.version, raw, tt.want)
		}
		var body struct {
			Job map[string]json.RawMessage `json:"job"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		family := "v0.0.38"
		if tt.version != "v0.0.38" {
			family = "v0.0.40"
		}
		for k := range body.Job {
			if !contains(schemaFields[family], k) {
				t.Errorf("%s: field %q is not in the job schema", tt.version, k)
			}
		}
	}
	// An absolute priority: a string in v0.0.38, a number object later.
	s := fullSpec
	s.Nice, s.Priority = 0, 900
	raw38, _ := json.Marshal(v0038{}.submitBody(s))
	raw40, _ := json.Marshal(v0040{version: "v0.0.40"}.submitBody(s))
	if !strings.Contains(string(raw38), `"priority":"900"`) || strings.Contains(string(raw38), `"nice"`) ||
		!strings.Contains(string(raw40), `"priority":{"set":true,"infinite":false,"number":900}`) {
		t.Errorf("priority: v0.0.38 %s / v0.0.40 %s", raw38, raw40)
	}
	// Cutting the time limit is only expressible from v0.0.40 on.
	if (v0038{}).zeroTimeLimitBody() != nil {
		t.Error("v0.0.38 reads a time limit of 0 as INFINITE; it must not be sent")
	}
	if raw, _ := json.Marshal(v0040{version: "v0.0.41"}.zeroTimeLimitBody()); string(raw) != `{"time_limit":{"set":true,"infinite":false,"number":0}}` {
		t.Errorf("v0.0.41 zero time limit %s", raw)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Job records of both families read into the same Job.
func TestDecodeJobsOfEachVersion(t *testing.T) {
	v38 := `{"jobs":[
	  {"job_id":12,"name":"tm-t1","comment":"c","job_state":"FAILED","state_reason":"NonZeroExitCode","state_description":"",
	   "nodes":"node-b","gres_detail":[],"exit_code":768,"batch_host":"node-b","start_time":1795617114,"submit_time":1795617110,
	   "standard_output":"/o","standard_error":"/e","user_name":"nobody","qos":"normal","priority":100000},
	  {"job_id":13,"job_state":"RUNNING","nodes":"node-b","gres_detail":["gpu:3(IDX:0-2)"],"exit_code":0},
	  {"job_id":14,"job_state":"COMPLETING","exit_code":9},
	  {"job_id":15,"job_state":"PENDING","state_reason":"ReqNodeNotAvail, UnavailableNodes:node-c"}]}`
	v40 := `{"jobs":[
	  {"job_id":12,"name":"tm-t1","comment":"c","job_state":["FAILED"],"state_reason":"NonZeroExitCode",
	   "nodes":"node-b","gres_detail":[],"batch_host":"node-b",
	   "exit_code":{"status":["ERROR"],"return_code":{"set":true,"infinite":false,"number":3},"signal":{"id":{"set":false,"number":0},"name":""}},
	   "start_time":{"set":true,"number":1795617114},"submit_time":{"set":true,"number":1795617110},
	   "standard_output":"/o","standard_error":"/e","user_name":"nobody","qos":"normal","priority":{"set":true,"number":100000}},
	  {"job_id":13,"job_state":["RUNNING"],"nodes":"node-b","gres_detail":["gpu:3(IDX:0-2)"]},
	  {"job_id":14,"job_state":["CANCELLED","COMPLETING"],"exit_code":{"status":["SIGNALED"],"return_code":{"set":true,"number":0},"signal":{"id":{"set":true,"number":9},"name":"KILL"}}},
	  {"job_id":15,"job_state":["PENDING"],"state_reason":"ReqNodeNotAvail, UnavailableNodes:node-c"}]}`
	want := []Job{
		{ID: 12, Name: "tm-t1", Comment: "c", State: StateFailed, Reason: "NonZeroExitCode", Nodes: "node-b", GRES: []string{},
			ExitCode: 3, BatchHost: "node-b", StartTime: time.Unix(1795617114, 0), SubmitTime: time.Unix(1795617110, 0),
			StdoutPath: "/o", StderrPath: "/e", User: "nobody", QoS: "normal", Priority: 100000},
		{ID: 13, State: StateRunning, Nodes: "node-b", GRES: []string{"gpu:3(IDX:0-2)"}},
		{ID: 14, Completing: true, Signal: 9},
		{ID: 15, State: StatePending, Reason: "ReqNodeNotAvail, UnavailableNodes:node-c"},
	}
	for version, raw := range map[string]string{"v0.0.38": v38, "v0.0.40": v40} {
		d, _ := dialectFor(version)
		got, err := d.decodeJobs([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		w := append([]Job(nil), want...)
		if version == "v0.0.40" {
			w[2].State = StateCancelled // v0.0.40 names the base state beside COMPLETING
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s:\n got %+v\nwant %+v", version, got, w)
		}
		if got[1].GPUIndexes() != "0,1,2" || got[2].Final() || !got[0].Final() || got[3].Final() {
			t.Errorf("%s: gpus %q, completing final %v, failed final %v, pending final %v", version,
				got[1].GPUIndexes(), got[2].Final(), got[0].Final(), got[3].Final())
		}
	}
}

func TestPickVersion(t *testing.T) {
	tests := []struct {
		paths   []string
		want    string
		wantErr bool
	}{
		{[]string{"/slurm/v0.0.38/job/submit", "/slurm/v0.0.38/jobs", "/openapi/v3"}, "v0.0.38", false},
		{[]string{"/slurm/v0.0.39/job/submit", "/slurm/v0.0.40/job/submit", "/slurm/v0.0.41/job/submit", "/slurmdb/v0.0.41/jobs/"}, "v0.0.41", false},
		{[]string{"/slurm/v0.0.37/job/submit", "/slurm/v0.0.39/job/submit"}, "", true},
		{nil, "", true},
	}
	for _, tt := range tests {
		got, err := pickVersion(tt.paths)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("pickVersion(%v) = %q, %v; want %q (error %v)", tt.paths, got, err, tt.want, tt.wantErr)
		}
	}
	for _, v := range []string{"v0.0.37", "v0.0.39", "0.0.40", "v1", ""} {
		if _, err := dialectFor(v); err == nil {
			t.Errorf("dialectFor(%q) accepted", v)
		}
	}
}

func TestStatesAndNodes(t *testing.T) {
	states := []struct {
		words      []string
		state      string
		completing bool
	}{
		{[]string{"PENDING"}, StatePending, false},
		{[]string{"COMPLETING"}, "", true},
		{[]string{"CONFIGURING"}, StatePending, false},
		{[]string{"RUNNING", "CONFIGURING"}, StateRunning, false},
		{[]string{"TIMEOUT", "COMPLETING"}, StateTimeout, true},
		{[]string{"REQUEUED"}, StatePending, false},
		{[]string{"preempted"}, StatePreempted, false},
	}
	for _, tt := range states {
		s, c := normalizeState(tt.words)
		if s != tt.state || c != tt.completing {
			t.Errorf("normalizeState(%v) = %q %v, want %q %v", tt.words, s, c, tt.state, tt.completing)
		}
	}
	nodes := map[string]string{"node-b": "node-b", "node-[1-3]": "node-1", "a,b": "a", "gpu[07,09]": "gpu07", "a,b[1-2]": "a", "": "", "(null)": ""}
	for in, want := range nodes {
		if got := (Job{Nodes: in}).FirstNode(); got != want {
			t.Errorf("FirstNode(%q) = %q, want %q", in, got, want)
		}
	}
	gres := map[string]string{"gpu:2(IDX:0-1)": "0,1", "gpu:a100:3(IDX:0,2-3)": "0,2,3", "gpu:1(IDX:5)": "5", "gpu:2": ""}
	for in, want := range gres {
		if got := (Job{GRES: []string{in}}).GPUIndexes(); got != want {
			t.Errorf("GPUIndexes(%q) = %q, want %q", in, got, want)
		}
	}
	keys := make([]string, 0, len(baseStates))
	for k := range baseStates {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) != 12 {
		t.Errorf("base states %v", keys)
	}
}
