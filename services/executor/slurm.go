package executor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/executor/internal/backends/slurm"
	"github.com/taskmesh/taskmesh/services/executor/internal/leaseconn"
)

// SlurmConfig configures the Slurm backend (docs/slurm.md): an executor
// that claims tasks and lets Slurm decide where and when they run.
type SlurmConfig struct {
	// AgentID, MachineID, Labels, Server, Token and TLS are as for an agent.
	AgentID, MachineID string
	Labels             []string
	Server             string
	Token              string
	TLS                *tls.Config
	// RESTEndpoint is slurmrestd: "unix:/path/slurmrestd.sock" or
	// "http(s)://host:port". RESTVersion is its API version ("" asks
	// slurmrestd). RESTUser and RESTTokenFile authenticate by JWT.
	RESTEndpoint, RESTVersion, RESTUser, RESTTokenFile string
	// Mode is "placement" (default) or "batch".
	Mode string
	// Partition of the jobs ("" is the cluster's default).
	Partition string
	// JobDir is shared with the nodes (batch output and work directories;
	// placement's placeholders run there; default /tmp for placement).
	JobDir string
	// Slots bounds the jobs held at once (default 64).
	Slots int
	// Types the backend claims (default shell, python, script, noop).
	Types []string
	// Priority is "nice" (default), "absolute" or "off"; PriorityStep the
	// Slurm priority one task priority level is worth (default 100).
	Priority     string
	PriorityStep int
	// QoS maps task priorities (1–10) to a Slurm QoS (ParseSlurmQoS).
	QoS map[int]string
	// DefaultMemoryMB is asked for when a task names no memory.
	DefaultMemoryMB int64
	// NodeAgents maps Slurm nodes to their agents' local API address;
	// NodeAgentURL is the others' address with {node} (placement).
	NodeAgents   map[string]string
	NodeAgentURL string
	// StateDir keeps one record per attempt held, so that a restarted
	// backend can still hand a task to its node.
	StateDir string
	// PollInterval of slurmctld's job list (default 1 s), and
	// PendingPollInterval while a job waits to start and the backend's
	// jobs are moving (default 100 ms).
	PollInterval, PendingPollInterval time.Duration
	// StartSignalListen, when set (placement), is the address placeholders'
	// start signals are taken on, and StartSignalAddr the host:port the
	// nodes reach it at (default: the listening address); see
	// docs/slurm.md#the-start-signal.
	StartSignalListen, StartSignalAddr string
	// ClaimWait, HeartbeatInterval and RenewInterval: zero takes the
	// defaults (30 s, 5 s, 30 s).
	ClaimWait, HeartbeatInterval, RenewInterval time.Duration
	// AgentLostAfter is the scheduler's --agent-lost-after: the backend
	// cancels its jobs before the server may lease their tasks again
	// (docs/executor.md, "Fencing"); zero takes 15 s.
	AgentLostAfter time.Duration
	Logger         *slog.Logger
}

// RunSlurm runs the Slurm backend until ctx is cancelled. Jobs stay in
// Slurm when it returns; a backend with the same agent id follows them
// again.
func RunSlurm(ctx context.Context, cfg SlurmConfig) error {
	if cfg.Server == "" {
		return errors.New("slurm backend: the server address is required")
	}
	if cfg.RESTEndpoint == "" {
		return errors.New("slurm backend: --slurmrestd is required (unix:/path/slurmrestd.sock or http(s)://host:port)")
	}
	if cfg.Mode == "" {
		cfg.Mode = string(slurm.ModePlacement)
	}
	if err := checkStartSignal(cfg); err != nil {
		return fmt.Errorf("slurm backend: %w", err)
	}
	client, err := slurm.NewClient(ctx, slurm.ClientConfig{
		Endpoint: cfg.RESTEndpoint, Version: cfg.RESTVersion, UserName: cfg.RESTUser, TokenFile: cfg.RESTTokenFile,
	})
	if err != nil {
		return fmt.Errorf("slurm backend: %w", err)
	}
	conn, err := leaseconn.Dial(cfg.Server, leaseconn.StaticToken(cfg.Token), cfg.TLS)
	if err != nil {
		return err
	}
	defer conn.Close()
	b, err := slurm.New(slurm.Config{
		AgentID: cfg.AgentID, MachineID: cfg.MachineID, Labels: cfg.Labels, Slots: cfg.Slots, Types: cfg.Types,
		ClaimWait: cfg.ClaimWait, PollInterval: cfg.PollInterval, PendingPollInterval: cfg.PendingPollInterval, HeartbeatInterval: cfg.HeartbeatInterval, RenewInterval: cfg.RenewInterval,
		AgentLostAfter: cfg.AgentLostAfter, StateDir: cfg.StateDir, NodeAgents: cfg.NodeAgents, NodeAgentURL: cfg.NodeAgentURL, Logger: cfg.Logger,
		StartSignalListen: cfg.StartSignalListen, StartSignalAddr: cfg.StartSignalAddr,
		Job: slurm.JobConfig{
			Mode: slurm.Mode(cfg.Mode), Partition: cfg.Partition, JobDir: cfg.JobDir, DefaultMemoryMB: cfg.DefaultMemoryMB,
			Priority: slurm.PriorityMode(cfg.Priority), PriorityStep: cfg.PriorityStep, QoS: cfg.QoS,
		},
	}, taskv1.NewLeaseServiceClient(conn), client)
	if err != nil {
		return err
	}
	if cfg.Logger != nil {
		cfg.Logger.Info("slurmrestd", "endpoint", cfg.RESTEndpoint, "version", client.Version())
	}
	return b.Run(ctx)
}

// SlurmNice is the nice the backend configured by cfg gives the job of a
// task with this priority (docs/slurm.md#priority-and-qos); 0 when its
// mapping sets none.
func SlurmNice(cfg SlurmConfig, priority int32) int {
	return slurm.JobConfig{Priority: slurm.PriorityMode(cfg.Priority), PriorityStep: cfg.PriorityStep}.Nice(priority)
}

// checkStartSignal refuses start signal settings that cannot work, before
// anything is dialled.
func checkStartSignal(cfg SlurmConfig) error {
	if cfg.StartSignalListen == "" {
		if cfg.StartSignalAddr != "" {
			return errors.New("--slurm-start-signal-addr needs --slurm-start-signal (the address to listen on)")
		}
		return nil
	}
	if cfg.Mode != string(slurm.ModePlacement) {
		return errors.New("--slurm-start-signal is for placement mode")
	}
	for _, a := range []string{cfg.StartSignalListen, cfg.StartSignalAddr} {
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("start signal address %q: want host:port", a)
		}
	}
	return nil
}

// ParseSlurmQoS reads "1-3=high,4-10=normal": task priorities (single
// levels or ranges of 1–10) and the QoS of their jobs.
func ParseSlurmQoS(s string) (map[int]string, error) {
	out := map[int]string{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		levels, qos, ok := strings.Cut(part, "=")
		qos = strings.TrimSpace(qos)
		if !ok || qos == "" {
			return nil, fmt.Errorf("%q is not priorities=qos", part)
		}
		lo, hi, isRange := strings.Cut(levels, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b, err2 := strconv.Atoi(strings.TrimSpace(hi))
		if err1 != nil || err2 != nil || a < 1 || b > 10 || a > b {
			return nil, fmt.Errorf("%q: priorities are 1 to 10, e.g. 1-3=high", part)
		}
		for p := a; p <= b; p++ {
			if prev, dup := out[p]; dup && prev != qos {
				return nil, fmt.Errorf("priority %d has two QoS (%s, %s)", p, prev, qos)
			}
			out[p] = qos
		}
	}
	return out, nil
}
