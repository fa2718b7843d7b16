package executor

import (
	"context"
	"maps"
	"strings"
	"testing"
)

func TestParseSlurmQoS(t *testing.T) {
	tests := []struct {
		in      string
		want    map[int]string
		wantErr string
	}{
		{in: "", want: map[int]string{}},
		{in: "1-3=high, 4-10=normal", want: map[int]string{1: "high", 2: "high", 3: "high", 4: "normal", 5: "normal",
			6: "normal", 7: "normal", 8: "normal", 9: "normal", 10: "normal"}},
		{in: "2=premium", want: map[int]string{2: "premium"}},
		{in: "0-3=high", wantErr: "priorities are 1 to 10"},
		{in: "3-1=high", wantErr: "priorities are 1 to 10"},
		{in: "x=high", wantErr: "priorities are 1 to 10"},
		{in: "1-3", wantErr: "is not priorities=qos"},
		{in: "1-3=", wantErr: "is not priorities=qos"},
		{in: "1-3=high,3=normal", wantErr: "priority 3 has two QoS"},
	}
	for _, tc := range tests {
		got, err := ParseSlurmQoS(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSlurmQoS(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("ParseSlurmQoS(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestRunSlurmRejectsBadConfig(t *testing.T) {
	tests := []struct {
		cfg     SlurmConfig
		wantErr string
	}{
		{SlurmConfig{AgentID: "s", RESTEndpoint: "unix:/x"}, "server address is required"},
		{SlurmConfig{AgentID: "s", Server: "127.0.0.1:1"}, "--slurmrestd is required"},
		{SlurmConfig{AgentID: "s", Server: "127.0.0.1:1", RESTEndpoint: "unix:/x", RESTVersion: "v0.0.38", Mode: "interactive"}, `mode "interactive"`},
		{SlurmConfig{AgentID: "s", Server: "127.0.0.1:1", RESTEndpoint: "unix:/x", RESTVersion: "v0.0.38"}, "node agents' addresses"},
		{SlurmConfig{AgentID: "s", Server: "127.0.0.1:1", RESTEndpoint: "unix:/x", RESTVersion: "v0.0.38", Mode: "batch"}, "shared with the nodes"},
		{SlurmConfig{AgentID: "s", Server: "127.0.0.1:1", RESTEndpoint: "unix:/x", RESTVersion: "v0.0.38", Mode: "batch", JobDir: "/tmp", Priority: "high"}, `priority mapping "high"`},
	}
	for _, tc := range tests {
		err := RunSlurm(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("RunSlurm(%+v) = %v, want %q", tc.cfg, err, tc.wantErr)
		}
	}
}
