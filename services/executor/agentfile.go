package executor

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/taskmesh/taskmesh/services/executor/internal/agent"
	"github.com/taskmesh/taskmesh/services/executor/internal/isolation"
	"github.com/taskmesh/taskmesh/services/executor/internal/logfile"
)

// Sandbox is the isolation block of an agent (see Config.Sandbox).
type Sandbox = isolation.Sandbox

// Retention bounds an agent's local files and journal (see
// Config.Retention).
type Retention = agent.Retention

// Sandbox types.
const (
	SandboxNone  = isolation.SandboxNone
	SandboxBwrap = isolation.SandboxBwrap
)

// File is an agent's configuration file in the shapes of the task-queue
// design (docs/executor.md, "Configuration file"): the command allow-list,
// the isolation, log and cleanup blocks. Unknown keys are errors; the
// design's blocks that configure the server instead are refused with the
// setting that replaces them (serverBlocks).
type File struct {
	// AllowedCommands and BlockedPatterns are the command allow-list
	// (Config.AllowedCommands, Config.BlockedPatterns).
	AllowedCommands []string `json:"allowed_commands"`
	BlockedPatterns []string `json:"blocked_patterns"`
	Isolation       struct {
		Enabled       bool     `json:"enabled"`
		Type          string   `json:"type"`
		User          string   `json:"user"`
		ReadonlyPaths []string `json:"readonly_paths"`
		WritablePaths []string `json:"writable_paths"`
	} `json:"isolation"`
	Log     LogConfig `json:"log"`
	Cleanup struct {
		Local struct {
			MaxAge  string `json:"max_age"`
			MaxSize string `json:"max_size"`
		} `json:"local"`
		Journal struct {
			MaxAge string `json:"max_age"`
		} `json:"journal"`
	} `json:"cleanup"`
}

// LogConfig is the log block: the agent's own log file and its rotation.
type LogConfig struct {
	// MaxSizeMB is the size a log file may reach (default 100).
	MaxSizeMB int `json:"max_size_mb"`
	// RetainCount is how many files are kept, the current one included
	// (default 7).
	RetainCount int `json:"retain_count"`
	// LocalDir holds the log files; empty logs to standard error only.
	LocalDir string `json:"local_dir"`
}

// serverBlocks are the design's configuration blocks that are not an
// agent's: each names what sets it instead. An operator who pastes one
// into an agent's file learns where it belongs rather than reading
// "unknown field".
var serverBlocks = map[string]string{
	"agent":   "the agent's connection is set by flags: --server (the gRPC front door), --claim-wait (claims long-poll instead of polling every poll_interval), --slots (tasks claimed at once)",
	"storage": "the object store of results is the scheduler's (taskmesh scheduler --s3-endpoint, --s3-bucket, --s3-prefix, …)",
	"webhook": "webhooks are set per task (its webhook field) or per tenant (the webhooks API)",
	"audit":   "the audit log's retention is the consumers' (taskmesh consumers --audit-retention, --audit-archive)",
}

// LoadFile reads an agent configuration file.
func LoadFile(path string) (File, error) {
	var f File
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	var blocks struct {
		Cleanup struct {
			S3 any `json:"s3"`
		} `json:"cleanup"`
	}
	var top map[string]any
	if yaml.Unmarshal(b, &top) == nil && yaml.Unmarshal(b, &blocks) == nil {
		for _, key := range slices.Sorted(maps.Keys(serverBlocks)) {
			if _, ok := top[key]; ok {
				return f, fmt.Errorf("%s: %s: is not an agent setting: %s", path, key, serverBlocks[key])
			}
		}
		if blocks.Cleanup.S3 != nil {
			return f, fmt.Errorf("%s: cleanup.s3: is not an agent setting: results in the object store are kept by the scheduler (taskmesh scheduler --result-retention)", path)
		}
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Apply sets cfg from the file's blocks.
func (f File) Apply(cfg *Config) error {
	for _, list := range []struct {
		key    string
		values []string
	}{{"allowed_commands", f.AllowedCommands}, {"blocked_patterns", f.BlockedPatterns}} {
		for n, v := range list.values {
			// An empty name allows nothing and an empty pattern would
			// block everything: both are mistakes.
			if strings.TrimSpace(v) == "" {
				return fmt.Errorf("%s[%d]: is empty", list.key, n)
			}
		}
	}
	cfg.AllowedCommands, cfg.BlockedPatterns = f.AllowedCommands, f.BlockedPatterns
	i := f.Isolation
	cfg.Sandbox = Sandbox{Enabled: i.Enabled, Type: i.Type, User: i.User, ReadonlyPaths: i.ReadonlyPaths, WritablePaths: i.WritablePaths}
	var err error
	c := f.Cleanup
	if cfg.Retention.MaxAge, err = ParseAge(c.Local.MaxAge); err != nil {
		return fmt.Errorf("cleanup.local.max_age: %w", err)
	}
	if cfg.Retention.MaxBytes, err = ParseSize(c.Local.MaxSize); err != nil {
		return fmt.Errorf("cleanup.local.max_size: %w", err)
	}
	if cfg.Retention.JournalMaxAge, err = ParseAge(c.Journal.MaxAge); err != nil {
		return fmt.Errorf("cleanup.journal.max_age: %w", err)
	}
	return nil
}

// ParseAge reads "7d", "36h", "90m" ("" is 0: the default).
func ParseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q: want a positive age such as 7d or 36h", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive age such as 7d or 36h", s)
	}
	return d, nil
}

// ParseSize reads "10GB", "512MB", "1GiB", "100" (bytes; "" is 0: the
// default).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := 1.0
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a positive size such as 10GB", s)
	}
	return int64(n * mult), nil
}

// OpenLog opens the agent's rotating log file of the log block.
func OpenLog(c LogConfig) (io.WriteCloser, error) {
	return logfile.Open(logfile.Config{Dir: c.LocalDir, Name: "agent", MaxBytes: int64(c.MaxSizeMB) << 20, Retain: c.RetainCount})
}
