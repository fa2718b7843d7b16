package main

import (
	"maps"
	"strings"
	"testing"
)

func TestKeyValues(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		{in: "premium=taskmesh-premium, standard=taskmesh-standard", want: map[string]string{"premium": "taskmesh-premium", "standard": "taskmesh-standard"}},
		{in: "", want: map[string]string{}},
		{in: "premium", wantErr: `"premium" is not queue=class`},
		{in: "=x", wantErr: `"=x" is not queue=class`},
		{in: "premium=", wantErr: `"premium=" is not queue=class`},
	}
	for _, tc := range tests {
		got, err := keyValues(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("keyValues(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("keyValues(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestExecutorRefusesAnUnknownBackend(t *testing.T) {
	cmd := executorCommand()
	cmd.SetArgs([]string{"--agent-id", "a", "--backend", "nomad"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `--backend "nomad": want process, kubernetes or slurm`) {
		t.Fatalf("error %v", err)
	}
}

// The Slurm backend's flags are checked before anything is dialled.
func TestExecutorSlurmFlagErrors(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--slurmrestd", "unix:/x", "--slurm-qos", "1-11=high"}, "--slurm-qos: \"1-11=high\": priorities are 1 to 10"},
		{[]string{"--slurmrestd", "unix:/x", "--slurm-node-agents", "node-a"}, "--slurm-node-agents: \"node-a\" is not node=address"},
		{[]string{"--slurmrestd", ""}, "--slurmrestd is required"},
		{[]string{"--slurmrestd", "slurm:6820"}, "want unix:/path or http(s)://host:port"},
	}
	for _, tc := range tests {
		cmd := executorCommand()
		cmd.SetArgs(append([]string{"--agent-id", "a", "--backend", "slurm", "--data-dir", t.TempDir()}, tc.args...))
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}
