package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/services/scheduler"
)

// pipelineFlags configure the model-conversion pipeline
// (docs/api/pipeline.md) of `taskmesh scheduler` and `taskmesh dev`.
type pipelineFlags struct {
	enabled  bool
	worker   string
	programs []string
	limits   []string
	sweep    time.Duration
	retries  int
	// retryDelay: how long a failed stage task waits for its retry.
	retryDelay time.Duration
	maxOut     int64
	// uploadTTL: how long an upload no job used is kept.
	uploadTTL time.Duration
}

func (p *pipelineFlags) add(f *pflag.FlagSet, enabledByDefault bool) {
	f.BoolVar(&p.enabled, "pipeline", enabledByDefault, "serve the model-conversion pipeline API (/jobs); needs an object store")
	f.StringVar(&p.worker, "pipeline-worker", "", "the stage worker on the agents, taskmesh-stage or taskmesh, run as `<it> pipeline-stage run …` for each stage (default: taskmesh-stage beside this executable, else this executable)")
	f.StringArrayVar(&p.programs, "pipeline-program", nil, `a stage's program: stage='["/opt/kneron/bin/bie_flow","--workdir","{workdir}"]' (repeatable; default: the built-in stand-in)`)
	f.StringArrayVar(&p.limits, "pipeline-upload-limit", nil, "an upload kind's size limit in bytes: model=1073741824, quant=…, ref_image=… (repeatable)")
	f.DurationVar(&p.sweep, "pipeline-sweep-interval", 5*time.Second, "how often jobs are reconciled with their stage tasks")
	f.IntVar(&p.retries, "pipeline-stage-retries", 0, "retries of a failed stage task before its job FAILS")
	f.DurationVar(&p.retryDelay, "pipeline-stage-retry-delay", 60*time.Second, "how long a failed stage task waits before its retry (whole seconds, 0s to 24h)")
	f.Int64Var(&p.maxOut, "pipeline-max-output-bytes", 1<<30, "largest output a stage may upload (enforced by the filesystem object store)")
	f.DurationVar(&p.uploadTTL, "pipeline-upload-ttl", 24*time.Hour, "how long an upload no job used is kept before it is deleted and its key refused (at least 1m)")
}

// config returns the pipeline's configuration; nil when it is off.
func (p *pipelineFlags) config() (*scheduler.PipelineConfig, error) {
	if !p.enabled {
		return nil, nil
	}
	if p.uploadTTL != 0 && p.uploadTTL < time.Minute {
		return nil, fmt.Errorf("--pipeline-upload-ttl %s: want at least 1m (0: the default, 24h)", p.uploadTTL)
	}
	cfg := &scheduler.PipelineConfig{SweepInterval: p.sweep, MaxOutputBytes: p.maxOut, UploadTTL: p.uploadTTL}
	if p.worker != "" {
		cfg.Worker = []string{p.worker, "pipeline-stage"}
	}
	if p.retries < 0 || p.retries > 100 {
		return nil, fmt.Errorf("--pipeline-stage-retries %d: want 0 to 100", p.retries)
	}
	if p.retryDelay < 0 || p.retryDelay > 24*time.Hour || p.retryDelay%time.Second != 0 {
		return nil, fmt.Errorf("--pipeline-stage-retry-delay %s: want whole seconds from 0s to 24h", p.retryDelay)
	}
	delay := int(p.retryDelay / time.Second)
	defaults := scheduler.DefaultPipelineStages()
	cfg.Stages = map[string]scheduler.PipelineStage{}
	for s, sc := range defaults {
		sc.Retries, sc.RetryDelay = p.retries, &delay
		cfg.Stages[s] = sc
	}
	for _, kv := range p.programs {
		stage, raw, ok := strings.Cut(kv, "=")
		_, known := defaults[stage]
		var argv []string
		if !ok || !known || json.Unmarshal([]byte(raw), &argv) != nil || len(argv) == 0 {
			return nil, fmt.Errorf("--pipeline-program %q: want onnx|bie|nef=<JSON array of the program's arguments>", kv)
		}
		sc := cfg.Stages[stage]
		sc.Program = argv
		cfg.Stages[stage] = sc
	}
	for _, kv := range p.limits {
		kind, raw, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--pipeline-upload-limit %q: want kind=<bytes>", kv)
		}
		if cfg.UploadLimits == nil {
			cfg.UploadLimits = map[string]int64{}
		}
		cfg.UploadLimits[kind] = n
	}
	return cfg, nil
}

// parseCaps reads --pipeline-caps: stage=n pairs separated by commas.
func parseCaps(s string) (map[string]int, error) {
	if s == "" {
		return nil, nil
	}
	caps := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		stage, raw, _ := strings.Cut(strings.TrimSpace(kv), "=")
		n, err := strconv.Atoi(raw)
		if _, known := scheduler.DefaultPipelineStages()[stage]; !known || err != nil || n < 1 {
			return nil, fmt.Errorf("--pipeline-caps %q: want onnx=N,bie=N,nef=N with N ≥ 1", s)
		}
		caps[stage] = n
	}
	return caps, nil
}
