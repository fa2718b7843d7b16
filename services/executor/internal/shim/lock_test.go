package shim

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A run directory the agent journaled but no shim ever served says that
// nothing ran, so a restarted agent may start the task afresh.
func TestInspectEmptyRunDir(t *testing.T) {
	dir := shortDir(t)
	st, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st != (RunDirState{}) {
		t.Fatalf("empty run dir: %+v, want neither alive nor run", st)
	}
	// A directory that is gone says the same.
	st, err = Inspect(filepath.Join(dir, "gone"))
	if err != nil || st != (RunDirState{}) {
		t.Fatalf("missing run dir: %+v, %v", st, err)
	}
}

// A shim serving a task holds the lock; once it has finished and left, its
// marker and status say the task ran.
func TestInspectLiveAndFinishedShim(t *testing.T) {
	r, err := launch(t, []string{"sh", "-c", "sleep 0.5"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Inspect(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.ShimAlive || !st.MayHaveRun {
		t.Fatalf("serving shim: %+v, want alive and run", st)
	}
	r.wait(t, 10*time.Second)
	r.sess.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = Inspect(r.dir)
		if err != nil {
			t.Fatal(err)
		}
		if !st.ShimAlive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the shim kept its lock after the task ended and the agent left")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !st.MayHaveRun {
		t.Fatalf("finished shim: %+v, want run", st)
	}
	// Without the marker the status file alone still says it ran.
	if err := os.Remove(filepath.Join(r.dir, SpawnedFile)); err != nil {
		t.Fatal(err)
	}
	if st, _ := Inspect(r.dir); !st.MayHaveRun {
		t.Fatalf("status file only: %+v, want run", st)
	}
}

// A second shim for a directory already served leaves at once, touching
// neither the socket nor the first shim's task, and says why.
func TestSecondShimForARunDirLeaves(t *testing.T) {
	r, err := launch(t, []string{"sh", "-c", "sleep 1; echo done"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := ReadSpec(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Launch{
		Command: []string{os.Args[0], "executor", "shim"}, Env: baseEnv(), RunDir: r.dir, Spec: spec,
	})
	if !IsAlreadyServed(err) {
		t.Fatalf("second shim: %v, want the already-served start error", err)
	}
	st := r.wait(t, 10*time.Second)
	if st.ExitCode != 0 || st.Stop != "" {
		t.Fatalf("first shim's task: %+v, want a clean exit", st)
	}
	out, _ := os.ReadFile(filepath.Join(r.dir, StdoutFile))
	if string(out) != "done\n" {
		t.Fatalf("stdout = %q", out)
	}
}
