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
	cmd.SetArgs([]string{"--agent-id", "a", "--backend", "slurm"})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `--backend "slurm": want process or kubernetes`) {
		t.Fatalf("error %v", err)
	}
}
