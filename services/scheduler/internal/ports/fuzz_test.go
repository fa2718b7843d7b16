package ports

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/protojson"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

// The REST gateway decodes bodies with these options (unknown fields are
// errors); the fuzz targets decode the same way.
var decode = protojson.UnmarshalOptions{DiscardUnknown: false}

// FuzzTaskSpecJSON feeds task spec bodies through what a create does with
// them: protojson, the protos' rules, the mapping, the domain's
// normalisation. Whatever the input, nothing panics, and a spec the domain
// accepts keeps its documented limits and survives the JSON it is stored
// as.
func FuzzTaskSpecJSON(f *testing.F) {
	for _, s := range []string{
		`{"name":"hello","type":"shell","command":"echo","args":["hi"]}`,
		`{"name":"t","command":"python","priority":1,"max_retries":0,"timeout":5,"lease_ttl_sec":5,"renew_interval_sec":1}`,
		`{"name":"d","command":"x","distribution":{"mode":"scatter","count":3,"labels":["gpu:a100"]}}`,
		`{"name":"g","command":"x","targets":{"machine_ids":["m1","m2"],"ips":["10.0.0.1"]},"repeat_count":2}`,
		`{"name":"v","type":"video","video":{"model":"wan2.2-t2v","type":"text_to_video","prompt":"cat","resolution":"480P","width":832,"height":480,"duration":5}}`,
		`{"name":"r","command":"x","resources":{"nvidia.com/gpu":"2","memory":"64Mi"},"queue":"premium","quota":"gu-1"}`,
		`{"name":"e","command":"x","env":{"A":"1","B_2":"\u00e9"},"depends_on":["a","b"]}`,
		`{"name":"","command":""}`, `{"priority":"11"}`, `[]`, `{`, `{"name":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	v, err := protovalidate.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var s taskv1.TaskSpec
		if decode.Unmarshal(body, &s) != nil || v.Validate(&s) != nil {
			return
		}
		spec, err := domain.NormalizeSpec(specInput(&s))
		if err != nil {
			return
		}
		if spec.Name == "" || len(spec.Name) > 255 || spec.Priority < 1 || spec.Priority > 10 || spec.LeaseTTL < 5 ||
			spec.RenewInterval >= spec.LeaseTTL || spec.Timeout <= 0 || spec.MaxRetries < 0 {
			t.Fatalf("accepted spec breaks its limits: %+v", spec)
		}
		if !utf8.ValidString(spec.Name) || !utf8.ValidString(spec.Command) {
			t.Fatalf("accepted spec holds invalid UTF-8: %q %q", spec.Name, spec.Command)
		}
		raw, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("accepted spec does not marshal: %v", err)
		}
		var back domain.Spec
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatalf("stored spec does not read back: %v", err)
		}
	})
}

// FuzzClaimBody feeds agent claim bodies through protojson and the
// protos' rules; an accepted claim stays within the documented limits.
func FuzzClaimBody(f *testing.F) {
	for _, s := range []string{
		`{"agent_id":"agent-001","machine_id":"m-1","limit":4,"request_id":"r-1","labels":["gpu:a100"],"wait":"30s","types":["shell"]}`,
		`{"agent_id":"a"}`, `{"agent_id":"a","limit":1001}`, `{"agent_id":"a","wait":"61s"}`, `{"agent_id":"a","wait":"-1s"}`,
		`{"agent_id":"","limit":-1}`, `{"agent_id":"a","labels":[""]}`, `{}`, `null`, `{"agent_id":"a","wait":"1e400s"}`,
	} {
		f.Add([]byte(s))
	}
	v, err := protovalidate.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r taskv1.ClaimTasksRequest
		if decode.Unmarshal(body, &r) != nil || v.Validate(&r) != nil {
			return
		}
		w := r.GetWait().AsDuration()
		if r.GetAgentId() == "" || len(r.GetAgentId()) > 128 || r.GetLimit() < 0 || r.GetLimit() > 1000 ||
			w < 0 || w.Seconds() > 60 || len(r.GetLabels()) > 64 || len(r.GetTypes()) > 32 {
			t.Fatalf("accepted claim breaks its limits: %v", &r)
		}
		for _, l := range r.GetLabels() {
			if l == "" || len(l) > 128 {
				t.Fatalf("accepted claim has label %q", l)
			}
		}
	})
}
