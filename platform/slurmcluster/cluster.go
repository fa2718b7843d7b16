// Package slurmcluster runs a real Slurm cluster on loopback: munged,
// MariaDB + slurmdbd, slurmctld, one slurmd per node and slurmrestd on a
// unix socket, started by deployments/slurm/cluster.sh under a temporary
// directory (docs/slurm.md#a-slurm-to-run-against). Tests use it through
// platform/slurmtest; the Slurm benchmark uses it directly.
//
// The script runs until its standard input closes, so a process that
// dies, even by SIGKILL, takes its cluster with it. Missing Slurm, munge
// or MariaDB packages are an error that names the install command.
package slurmcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Install is the command that installs what the cluster needs (Debian).
const Install = "apt-get install -y slurmctld slurmd slurmrestd slurm-client munge slurmdbd mariadb-server"

// ErrMissingPackages is returned (wrapped, with the script's message) when
// a program the cluster needs is not installed.
var ErrMissingPackages = errors.New("slurmcluster: missing packages; install them with `" + Install + "`")

// Node is a Slurm node and its GPUs.
type Node struct {
	Name string
	GPUs int
}

// Options configures a cluster; zero values take the script's defaults
// (node-a with 2 GPUs and node-b with 4 started, node-c with 8 declared
// but down, 2 CPUs and 4000 MB per node, accounting on, QoS high:1000).
type Options struct {
	Nodes, DownNodes []Node
	// NoDownNodes declares no down node (DownNodes empty means the default).
	NoDownNodes bool
	CPUs        int
	MemoryMB    int
	// QoS is "name:priority …" (empty: the default).
	QoS string
	// Script overrides the location of cluster.sh.
	Script string
	// Stderr receives the script's messages (default: kept for errors).
	Stderr io.Writer
}

// Cluster is a running cluster.
type Cluster struct {
	// Dir holds everything (logs under Dir/log).
	Dir string
	// Conf is slurm.conf: SLURM_CONF for the command-line tools.
	Conf string
	// Socket is slurmrestd's unix socket (rest_auth/local).
	Socket string
	// RESTVersion is the REST API version slurmrestd serves (v0.0.38).
	RESTVersion string
	// RESTUser is the user slurmrestd runs as; jobs submitted through the
	// socket run as this user.
	RESTUser string
	// Partition is the partition of every node.
	Partition string
	// JobDir is a directory every user may write (batch job output).
	JobDir    string
	Nodes     []Node
	DownNodes []Node

	cmd     *exec.Cmd
	stdin   io.WriteCloser
	exited  chan struct{}
	stderr  *lockedBuffer
	closeMu sync.Mutex
	closed  bool
}

// Start starts a cluster under a new temporary directory and returns once
// every node is idle. Close stops it.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	script := o.Script
	if script == "" {
		var err error
		if script, err = findScript(); err != nil {
			return nil, err
		}
	}
	// Short: the unix socket paths under it must stay below 108 bytes.
	dir, err := os.MkdirTemp("", "tmslurm")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, exited: make(chan struct{}), stderr: &lockedBuffer{}}
	cmd := exec.Command(script, dir)
	// The script removes the directory itself once its daemons are gone:
	// also when this process dies first.
	cmd.Env = append(append(os.Environ(), o.env()...), "SLURM_REMOVE_DIR=1")
	var errOut io.Writer = c.stderr
	if o.Stderr != nil {
		errOut = io.MultiWriter(c.stderr, o.Stderr)
	}
	cmd.Stderr = errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("slurmcluster: start %s: %w", script, err)
	}
	c.cmd = cmd
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" && !ok {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()
	timer := time.NewTimer(3 * time.Minute)
	defer timer.Stop()
	select {
	case ok := <-ready:
		if !ok {
			<-c.exited
			return nil, c.startError()
		}
	case <-timer.C:
		c.Close()
		return nil, fmt.Errorf("slurmcluster: the cluster was not ready after 3 minutes; logs in %s/log:\n%s", dir, c.stderr)
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
	if err := c.readEnv(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (o Options) env() []string {
	nodes := func(ns []Node) string {
		parts := make([]string, len(ns))
		for i, n := range ns {
			parts[i] = n.Name + ":" + strconv.Itoa(n.GPUs)
		}
		return strings.Join(parts, " ")
	}
	var env []string
	if len(o.Nodes) > 0 {
		env = append(env, "SLURM_NODES="+nodes(o.Nodes))
	}
	if o.NoDownNodes {
		env = append(env, "SLURM_DOWN_NODES=")
	} else if len(o.DownNodes) > 0 {
		env = append(env, "SLURM_DOWN_NODES="+nodes(o.DownNodes))
	}
	if o.CPUs > 0 {
		env = append(env, "SLURM_NODE_CPUS="+strconv.Itoa(o.CPUs))
	}
	if o.MemoryMB > 0 {
		env = append(env, "SLURM_NODE_MEMORY="+strconv.Itoa(o.MemoryMB))
	}
	if o.QoS != "" {
		env = append(env, "SLURM_QOS="+o.QoS)
	}
	return env
}

// startError explains why the script ended before the cluster was ready.
// The directory stays, with the daemons' logs.
func (c *Cluster) startError() error {
	msg := strings.TrimSpace(c.stderr.String())
	code := c.cmd.ProcessState.ExitCode()
	if code == 3 { // the script's "missing packages"
		return fmt.Errorf("%w: %s", ErrMissingPackages, msg)
	}
	return fmt.Errorf("slurmcluster: the cluster did not start (exit %d): %s", code, msg)
}

// readEnv reads cluster.env, which the script writes before "ready".
func (c *Cluster) readEnv() error {
	raw, err := os.ReadFile(filepath.Join(c.Dir, "cluster.env"))
	if err != nil {
		return fmt.Errorf("slurmcluster: %w", err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	c.Conf, c.Socket, c.RESTVersion = env["SLURM_CONF"], env["SLURMRESTD_SOCKET"], env["SLURM_REST_VERSION"]
	c.RESTUser, c.Partition, c.JobDir = env["SLURM_REST_USER"], env["SLURM_PARTITION"], env["SLURM_JOB_DIR"]
	if c.Nodes, err = parseNodes(env["SLURM_NODES"]); err != nil {
		return err
	}
	if c.DownNodes, err = parseNodes(env["SLURM_DOWN_NODES"]); err != nil {
		return err
	}
	if c.Conf == "" || c.Socket == "" {
		return fmt.Errorf("slurmcluster: %s/cluster.env is incomplete", c.Dir)
	}
	return nil
}

func parseNodes(s string) ([]Node, error) {
	var out []Node
	for _, f := range strings.Fields(s) {
		name, gpus, _ := strings.Cut(f, ":")
		n, err := strconv.Atoi(gpus)
		if err != nil {
			return nil, fmt.Errorf("slurmcluster: node %q: %w", f, err)
		}
		out = append(out, Node{Name: name, GPUs: n})
	}
	return out, nil
}

// Close stops every daemon and removes the directory.
func (c *Cluster) Close() error {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	// End of input is the script's signal to stop its daemons.
	_ = c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	return os.RemoveAll(c.Dir)
}

// Command returns a command-line tool's command (squeue, sacct, scontrol,
// sbatch, scancel) aimed at this cluster.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	cmd.Dir = c.JobDir
	return cmd
}

// Output runs a tool and returns its standard output.
func (c *Cluster) Output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := c.Command(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Log returns the tail of one of the cluster's logs (slurmctld.log,
// slurmd-<node>.log, slurmrestd.out, …), for test failure messages.
func (c *Cluster) Log(name string, maxBytes int) string {
	raw, err := os.ReadFile(filepath.Join(c.Dir, "log", name))
	if err != nil {
		return err.Error()
	}
	if len(raw) > maxBytes {
		raw = raw[len(raw)-maxBytes:]
	}
	return string(raw)
}

// findScript finds deployments/slurm/cluster.sh: $TASKMESH_SLURM_CLUSTER,
// else above this source file (tests), else above the working directory
// (a binary run from the repository).
func findScript() (string, error) {
	if p := os.Getenv("TASKMESH_SLURM_CLUSTER"); p != "" {
		return p, nil
	}
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			p := filepath.Join(d, "deployments", "slurm", "cluster.sh")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("slurmcluster: deployments/slurm/cluster.sh not found; set TASKMESH_SLURM_CLUSTER")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
