package chaos

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/buildtest"
)

// The short version of `make chaos`: the whole deployment as processes,
// a minute of load and faults from a fixed seed (TASKMESH_CHAOS_SEED picks
// another), every invariant 0.
func TestChaosShort(t *testing.T) {
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (%v): install it with apt-get install -y redis-server", err)
	}
	bin := filepath.Join(t.TempDir(), "taskmesh")
	buildtest.Binary(t, "github.com/taskmesh/taskmesh/services/taskmesh/cmd/taskmesh", bin, "")
	seed := int64(7)
	if s := os.Getenv("TASKMESH_CHAOS_SEED"); s != "" {
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("TASKMESH_CHAOS_SEED: %v", err)
		}
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Binary: bin, RedisServer: redis, Duration: 60 * time.Second, Drain: 2 * time.Minute,
		Rate: 10, Seed: seed, Short: true, Out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Windows) == 0 || rep.Requests == 0 {
		t.Fatalf("the run injected %d faults and made %d requests", len(rep.Windows), rep.Requests)
	}
	if rep.Failed() {
		t.Fatalf("an invariant does not hold with seed %d (logs in %s)", rep.Seed, rep.Dir)
	}
}

// Without ffmpeg the run stops before it starts anything and names the
// package to install: the agents could not render the load's videos.
func TestRunWithoutFFmpegSaysWhatToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rep, err := Run(context.Background(), Config{Binary: "taskmesh", Rate: 1, Duration: time.Second, Drain: time.Second, Seed: 1})
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y ffmpeg") || rep != nil {
		t.Fatalf("Run without ffmpeg: report %v, err %v; want the install command and no run", rep, err)
	}
}
