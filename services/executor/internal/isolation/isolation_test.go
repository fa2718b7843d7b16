package isolation

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseResources(t *testing.T) {
	tests := []struct {
		in      map[string]string
		want    Resources
		wantErr string
	}{
		{in: map[string]string{"memory": "64Mi", "cpu": "500m", "pids": "100", "nvidia.com/gpu": "2"},
			want: Resources{MemoryBytes: 64 << 20, CPUMillis: 500, Pids: 100}},
		{in: map[string]string{"memory": "2G", "cpu": "1.5"}, want: Resources{MemoryBytes: 2e9, CPUMillis: 1500}},
		{in: map[string]string{"memory": "1Gi", "cpu": "2"}, want: Resources{MemoryBytes: 1 << 30, CPUMillis: 2000}},
		{in: map[string]string{"memory": "5e8"}, want: Resources{MemoryBytes: 5e8}},
		{in: map[string]string{"memory": "1"}, want: Resources{MemoryBytes: 4096}},
		{in: map[string]string{"cpu": "1m"}, want: Resources{CPUMillis: 10}},
		{in: nil, want: Resources{}},
		{in: map[string]string{"memory": "lots"}, wantErr: "resources.memory"},
		{in: map[string]string{"memory": "-1Gi"}, wantErr: "resources.memory"},
		{in: map[string]string{"cpu": "fast"}, wantErr: "resources.cpu"},
		{in: map[string]string{"pids": "0"}, wantErr: "resources.pids"},
	}
	for _, tt := range tests {
		got, err := ParseResources(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: err %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%v = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestWithoutCgroupsOrSandbox(t *testing.T) {
	l, err := New(Config{NoCgroups: true})
	if err != nil {
		t.Fatal(err)
	}
	if l.Mode() != ModeRlimit || l.Sandboxed() || len(l.Warnings()) != 2 {
		t.Errorf("mode %s, sandboxed %v, warnings %v", l.Mode(), l.Sandboxed(), l.Warnings())
	}
	if g, err := l.Cgroup("att", Resources{MemoryBytes: 1 << 20}); g != nil || err != nil {
		t.Errorf("cgroup without cgroups = %v, %v", g, err)
	}
	if got := l.RlimitAS(Resources{MemoryBytes: 1 << 20}); got != 1<<20 {
		t.Errorf("RlimitAS = %d", got)
	}
	argv := []string{"python", "x.py"}
	if got := l.Wrap(argv, "/w"); !slices.Equal(got, argv) {
		t.Errorf("Wrap without a sandbox = %v", got)
	}
	if _, err := New(Config{NoCgroups: true, Sandbox: Sandbox{Enabled: true, Type: "docker"}}); err == nil {
		t.Error("an unknown sandbox type was accepted")
	}
	if _, err := New(Config{NoCgroups: true, Sandbox: Sandbox{Enabled: true, Type: SandboxBwrap, User: "root"}}); err == nil {
		t.Error("a sandbox running tasks as root was accepted")
	}
}

func TestWrapBindsOnlyTheTaskAndHidesTheAgent(t *testing.T) {
	// The sandbox is part of the agent: its tests need bubblewrap, which
	// .ci/run installs, rather than passing without it.
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bubblewrap is not installed (apt-get install -y bubblewrap)")
	}
	data := t.TempDir()
	token := filepath.Join(data, "token")
	if err := os.WriteFile(token, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	etcToken := "/etc/hostname" // stands for a token file under a read-only path
	l, err := New(Config{NoCgroups: true, Hidden: []string{data, token, etcToken},
		Sandbox: Sandbox{Enabled: true, Type: SandboxBwrap, User: "nobody", WritablePaths: []string{"/scratch"}}})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(l.Wrap([]string{"python", "x.py"}, data+"/work/t1", data+"/runs/a/task"), " ")
	for _, want := range []string{"--ro-bind-try /usr /usr", "--ro-bind-try /etc /etc", "--ro-bind /dev/null /etc/hostname",
		"--bind-try " + data + "/work/t1 " + data + "/work/t1", "--bind-try /scratch /scratch", "--chdir " + data + "/work/t1 -- python x.py"} {
		if !strings.Contains(got, want) {
			t.Errorf("argv misses %q:\n%s", want, got)
		}
	}
	// The data directory is not under a bound path: it is simply absent,
	// not masked.
	if strings.Contains(got, "--tmpfs "+data) || strings.Contains(got, "/dev/null "+token) {
		t.Errorf("masked a path nothing binds:\n%s", got)
	}
	if strings.Index(got, "/etc/hostname") > strings.Index(got, "--bind-try "+data) {
		t.Errorf("masks must come before the task's binds:\n%s", got)
	}
}
