package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/flagenv"
)

// schedulerFlags are the flags of `taskmesh scheduler`.
type schedulerFlags struct {
	common
	listen, quotaTarget string
	writers             int
	agentLostAfter      time.Duration
	resultRetention     time.Duration
	historyRetention    time.Duration
	preemptGap          int
	objects             objectFlags
	video               videoFlags
	pipeline            pipelineFlags
}

func schedulerCommand() *cobra.Command {
	var f schedulerFlags
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the scheduler service (tasks, leases, the executor protocol)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "scheduler", func(ctx context.Context, p *process) error {
				cfg, err := f.config(ctx, p)
				if err != nil {
					return err
				}
				return scheduler.Run(ctx, cfg)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func (s *schedulerFlags) add(cmd *cobra.Command) {
	s.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&s.listen, "listen", "127.0.0.1:9091", "internal gRPC address")
	f.IntVar(&s.writers, "writers", 4, "write transactions at once: writers/2 (at least one) each for batched changes, creations with a request id, and claims")
	f.StringVar(&s.quotaTarget, "quota", "", "quota service's internal gRPC address: admission of queued GPU work (empty: tasks are admitted at once)")
	f.DurationVar(&s.agentLostAfter, "agent-lost-after", 15*time.Second, "release an agent's leases after this long without heartbeats")
	f.DurationVar(&s.resultRetention, "result-retention", 30*24*time.Hour,
		"delete results from the object store after this long (an S3 lifecycle rule when the store takes one)")
	f.DurationVar(&s.historyRetention, "history-retention", scheduler.DefaultHistoryRetention,
		"archive the events of tasks that ended this long ago to the object store and delete their rows (negative: keep them for ever)")
	f.IntVar(&s.preemptGap, "preempt-gap", 3, "priority gap from which waiting tasks preempt running ones; an urgent task (1) also preempts work of priority 3 or lower (negative: never)")
	s.objects.add(cmd)
	s.video.add(f, true)
	s.pipeline.add(f, false)
}

// config is the scheduler's process configuration. Tasks with a queue, a
// GU quota or resources wait for the quota service's admission when
// --quota names it.
func (s *schedulerFlags) config(ctx context.Context, p *process) (scheduler.ServerConfig, error) {
	if err := p.requireInternalToken(); err != nil {
		return scheduler.ServerConfig{}, err
	}
	objects, err := s.objects.open(ctx)
	if err != nil {
		return scheduler.ServerConfig{}, err
	}
	video, err := s.video.config()
	if err != nil {
		return scheduler.ServerConfig{}, err
	}
	pipeline, err := s.pipeline.config()
	if err != nil {
		return scheduler.ServerConfig{}, err
	}
	return scheduler.ServerConfig{
		Service: scheduler.Config{Kafka: p.kafka, Objects: objects, Writers: s.writers, Logger: p.log,
			Timing: scheduler.Timing{AgentLostAfter: s.agentLostAfter, PreemptGap: s.preemptGap, ResultRetention: s.resultRetention,
				HistoryRetention: s.historyRetention},
			Video:         video,
			Pipeline:      pipeline,
			InternalToken: p.internalToken},
		DatabaseURL: s.databaseURL, MaxConns: int32(5 + scheduler.WriterConns(s.writers) + 16), Listen: s.listen, QuotaTarget: s.quotaTarget,
	}, nil
}

// objectFlags choose the store the scheduler keeps large results in.
type objectFlags struct {
	kind                     string
	fsRoot, fsBaseURL, fsKey string
	s3                       objectstore.S3Config
	s3SecretFile             string
}

func (o *objectFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.kind, "objects", "none", "result object store: fs, s3 or none")
	f.StringVar(&o.fsRoot, "objects-fs-root", "", "fs store directory")
	f.StringVar(&o.fsBaseURL, "objects-fs-base-url", "", "public URL the gateway serves /objects at")
	f.StringVar(&o.fsKey, "objects-fs-secret-file", "", "file holding the URL-signing secret (32+ bytes)")
	f.StringVar(&o.s3.Endpoint, "s3-endpoint", "", "S3 endpoint host:port")
	f.StringVar(&o.s3.Bucket, "s3-bucket", "", "S3 bucket")
	f.StringVar(&o.s3.Region, "s3-region", "us-east-1", "S3 region")
	f.StringVar(&o.s3.Prefix, "s3-prefix", "task-results/", "key prefix")
	f.StringVar(&o.s3.AccessKey, "s3-access-key", "", "S3 access key")
	f.StringVar(&o.s3SecretFile, "s3-secret-key-file", "", "file holding the S3 secret key")
	f.BoolVar(&o.s3.UseSSL, "s3-ssl", true, "use TLS to S3")
}

// open returns the chosen store; nil for none.
func (o *objectFlags) open(ctx context.Context) (objectstore.Store, error) {
	switch o.kind {
	case "fs":
		return openFS(o.fsRoot, o.fsBaseURL, o.fsKey)
	case "s3":
		secret, err := flagenv.Secret("", o.s3SecretFile)
		if err != nil {
			return nil, err
		}
		s3 := o.s3
		s3.SecretKey = secret
		return objectstore.NewS3(ctx, s3)
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("--objects must be fs, s3 or none, not %q", o.kind)
}

// openFS is the filesystem store under root, its URLs signed with the
// secret in keyFile.
func openFS(root, baseURL, keyFile string) (*objectstore.FS, error) {
	secret, err := flagenv.Secret("", keyFile)
	if err != nil {
		return nil, err
	}
	return objectstore.NewFS(objectstore.FSConfig{Root: root, BaseURL: baseURL, Secret: []byte(secret)})
}
