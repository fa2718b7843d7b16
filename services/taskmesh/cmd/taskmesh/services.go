package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/gateway"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/flagenv"
)

// common are the flags every service shares.
type common struct {
	databaseURL, kafkaBrokers, kafkaSASLMech, kafkaSASLUser, kafkaSASLPassFile string
	kafkaTLSCA                                                                 string
	kafkaTLS                                                                   bool
	internalToken, internalTokenFile                                           string
	otelExporter, otlpEndpoint, logFormat                                      string
}

func (c *common) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.databaseURL, "database-url", "", "Postgres URL (env TASKMESH_DATABASE_URL)")
	f.StringVar(&c.kafkaBrokers, "kafka-brokers", "", "comma-separated seed brokers")
	f.BoolVar(&c.kafkaTLS, "kafka-tls", false, "connect to Kafka over TLS")
	f.StringVar(&c.kafkaTLSCA, "kafka-tls-ca", "", "CA file for Kafka TLS")
	f.StringVar(&c.kafkaSASLMech, "kafka-sasl-mechanism", "", "SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN")
	f.StringVar(&c.kafkaSASLUser, "kafka-sasl-user", "", "SASL user")
	f.StringVar(&c.kafkaSASLPassFile, "kafka-sasl-password-file", "", "file holding the SASL password")
	f.StringVar(&c.internalToken, "internal-token", "", "token internal services require (prefer --internal-token-file)")
	f.StringVar(&c.internalTokenFile, "internal-token-file", "", "file holding the internal token")
	f.StringVar(&c.otelExporter, "otel-exporter", "none", "trace exporter: none, stdout or otlp")
	f.StringVar(&c.otlpEndpoint, "otlp-endpoint", "", "OTLP/gRPC collector host:port")
	f.StringVar(&c.logFormat, "log-format", "text", "text or json")
}

func (c *common) setup(ctx context.Context, cmd *cobra.Command, service string) (*slog.Logger, kafka.Config, string, func(context.Context) error, error) {
	if err := flagenv.Apply(cmd.Flags()); err != nil {
		return nil, kafka.Config{}, "", nil, err
	}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, nil)
	}
	log := slog.New(h).With("service", service)
	token, err := flagenv.Secret(c.internalToken, c.internalTokenFile)
	if err != nil {
		return nil, kafka.Config{}, "", nil, err
	}
	k := kafka.Config{ClientID: "taskmesh-" + service}
	if c.kafkaBrokers != "" {
		k.Brokers = strings.Split(c.kafkaBrokers, ",")
	}
	if c.kafkaTLS {
		k.TLS = &kafka.TLSConfig{CAFile: c.kafkaTLSCA}
	}
	if c.kafkaSASLMech != "" {
		pass, err := flagenv.Secret("", c.kafkaSASLPassFile)
		if err != nil {
			return nil, kafka.Config{}, "", nil, err
		}
		k.SASL = &kafka.SASLConfig{Mechanism: c.kafkaSASLMech, Username: c.kafkaSASLUser, Password: pass}
	}
	shutdown, err := otel.Setup(ctx, otel.Config{Exporter: c.otelExporter, OTLPEndpoint: c.otlpEndpoint, OTLPInsecure: true, ServiceName: "taskmesh-" + service})
	if err != nil {
		return nil, kafka.Config{}, "", nil, err
	}
	return log, k, token, shutdown, nil
}

func schedulerCommand() *cobra.Command {
	var (
		c                        common
		listen, objectsKind      string
		fsRoot, fsBaseURL, fsKey string
		s3                       objectstore.S3Config
		s3SecretFile             string
		writers                  int
		agentLostAfter           time.Duration
		preemptGap               int
		video                    videoFlags
		quotaTarget              string
	)
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the scheduler service (tasks, leases, the executor protocol)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, k, token, shutdown, err := c.setup(ctx, cmd, "scheduler")
			if err != nil {
				return err
			}
			defer shutdown(context.Background())
			if token == "" {
				return errors.New("an internal token is required (--internal-token-file or TASKMESH_INTERNAL_TOKEN)")
			}
			pool, err := pg.Open(ctx, pg.Config{URL: c.databaseURL, Schema: scheduler.Schema, MaxConns: int32(5 + writers + 16), ApplicationName: "taskmesh-scheduler"})
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := pg.Migrate(ctx, pool, scheduler.Schema, scheduler.Migrations()...); err != nil {
				return err
			}
			var objects objectstore.Store
			switch objectsKind {
			case "fs":
				secret, err := flagenv.Secret("", fsKey)
				if err != nil {
					return err
				}
				objects, err = objectstore.NewFS(objectstore.FSConfig{Root: fsRoot, BaseURL: fsBaseURL, Secret: []byte(secret)})
				if err != nil {
					return err
				}
			case "s3":
				if s3.SecretKey, err = flagenv.Secret("", s3SecretFile); err != nil {
					return err
				}
				if objects, err = objectstore.NewS3(ctx, s3); err != nil {
					return err
				}
			case "none":
			default:
				return fmt.Errorf("--objects must be fs, s3 or none, not %q", objectsKind)
			}
			vc, err := video.config()
			if err != nil {
				return err
			}
			cfg := scheduler.Config{DB: pool, Kafka: k, Objects: objects, Writers: writers, Logger: log,
				Timing: scheduler.Timing{AgentLostAfter: agentLostAfter, PreemptGap: preemptGap}, Video: vc}
			if quotaTarget != "" {
				// Tasks with a queue, a GU quota or resources wait for the
				// quota service's admission.
				conn, err := grpc.NewClient(quotaTarget, grpc.WithTransportCredentials(insecure.NewCredentials()), otel.DialOption())
				if err != nil {
					return fmt.Errorf("--quota %q: %w", quotaTarget, err)
				}
				defer conn.Close()
				cfg.Quota, cfg.InternalToken = conn, token
			}
			svc, err := scheduler.New(cfg)
			if err != nil {
				return err
			}
			srv, err := grpcserver.New(grpcserver.Options{InternalToken: token, Logger: log})
			if err != nil {
				return err
			}
			svc.Register(srv)
			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			go func() { <-ctx.Done(); srv.GracefulStop() }()
			go func() { _ = svc.Run(ctx) }()
			log.Info("scheduler serving", "addr", lis.Addr().String())
			return srv.Serve(lis)
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:9091", "internal gRPC address")
	f.IntVar(&writers, "writers", 4, "concurrent group-commit transactions")
	f.StringVar(&quotaTarget, "quota", "", "quota service's internal gRPC address: admission of queued GPU work (empty: tasks are admitted at once)")
	f.DurationVar(&agentLostAfter, "agent-lost-after", 15*time.Second, "release an agent's leases after this long without heartbeats")
	f.IntVar(&preemptGap, "preempt-gap", 3, "priority gap from which waiting tasks preempt running ones (negative: never)")
	f.StringVar(&objectsKind, "objects", "none", "result object store: fs, s3 or none")
	f.StringVar(&fsRoot, "objects-fs-root", "", "fs store directory")
	f.StringVar(&fsBaseURL, "objects-fs-base-url", "", "public URL the gateway serves /objects at")
	f.StringVar(&fsKey, "objects-fs-secret-file", "", "file holding the URL-signing secret (32+ bytes)")
	f.StringVar(&s3.Endpoint, "s3-endpoint", "", "S3 endpoint host:port")
	f.StringVar(&s3.Bucket, "s3-bucket", "", "S3 bucket")
	f.StringVar(&s3.Region, "s3-region", "us-east-1", "S3 region")
	f.StringVar(&s3.Prefix, "s3-prefix", "task-results/", "key prefix")
	f.StringVar(&s3.AccessKey, "s3-access-key", "", "S3 access key")
	f.StringVar(&s3SecretFile, "s3-secret-key-file", "", "file holding the S3 secret key")
	f.BoolVar(&s3.UseSSL, "s3-ssl", true, "use TLS to S3")
	video.add(f, true)
	return cmd
}

func gatewayCommand() *cobra.Command {
	var (
		c                          common
		httpAddr, grpcAddr, target string
		quotaTarget                string
		fsRoot, fsBaseURL, fsKey   string
		limits                     rateLimitFlags
		adminKeyFile               string
		liveCfg                    gateway.LiveConfig
	)
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the gateway: REST API, gRPC front door, authentication",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, k, token, shutdown, err := c.setup(ctx, cmd, "gateway")
			if err != nil {
				return err
			}
			defer shutdown(context.Background())
			pool, err := pg.Open(ctx, pg.Config{URL: c.databaseURL, Schema: "gateway", MaxConns: 16, ApplicationName: "taskmesh-gateway"})
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := pg.Migrate(ctx, pool, "gateway", gateway.Migrations()); err != nil {
				return err
			}
			liveCfg.Kafka = k // live task streams tail the task topic; without brokers they answer 503
			cfg := gateway.Config{HTTPAddr: httpAddr, GRPCAddr: grpcAddr, SchedulerTarget: target, QuotaTarget: quotaTarget,
				InternalToken: token, DB: pool, Logger: log, Live: liveCfg}
			if cfg.RateLimits, err = limits.config(); err != nil {
				return err
			}
			if fsRoot != "" {
				secret, err := flagenv.Secret("", fsKey)
				if err != nil {
					return err
				}
				fs, err := objectstore.NewFS(objectstore.FSConfig{Root: fsRoot, BaseURL: fsBaseURL, Secret: []byte(secret)})
				if err != nil {
					return err
				}
				cfg.Objects = fs.Handler()
			}
			g, err := gateway.New(ctx, cfg)
			if err != nil {
				return err
			}
			if adminKeyFile != "" {
				_, created, err := g.AdminKeyFile(ctx, adminKeyFile, true)
				if err != nil {
					g.Close()
					return err
				}
				if created {
					log.Info("operator key for the admin API written", "file", adminKeyFile)
				}
			}
			log.Info("gateway serving", "http", g.HTTPAddr(), "grpc", g.GRPCAddr())
			return g.Run(ctx)
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&httpAddr, "http", "127.0.0.1:8080", "REST address")
	f.StringVar(&grpcAddr, "grpc", "127.0.0.1:9090", "gRPC front door address")
	f.StringVar(&target, "scheduler", "127.0.0.1:9091", "scheduler's internal gRPC address")
	f.StringVar(&quotaTarget, "quota", "", "quota service's internal gRPC address (empty: no quota API)")
	f.StringVar(&fsRoot, "objects-fs-root", "", "serve the fs object store at /objects/ from this directory")
	f.StringVar(&fsBaseURL, "objects-fs-base-url", "", "public URL of /objects")
	f.StringVar(&fsKey, "objects-fs-secret-file", "", "file holding the URL-signing secret")
	f.StringVar(&adminKeyFile, "admin-key-file", "", "if no usable operator key exists, create one and write it to this file (0600)")
	limits.add(f)
	f.IntVar(&liveCfg.MaxStreamsPerTenant, "live-max-streams-per-tenant", 100, "open live task streams (SSE, WebSocket) per tenant on this gateway")
	f.DurationVar(&liveCfg.IdleTimeout, "live-idle-timeout", 10*time.Minute, "close a live task stream that sent nothing for this long")
	return cmd
}

func replayCommand() *cobra.Command {
	var (
		c      common
		keep   bool
		inline bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Rebuild the scheduler's projections from the event log into fresh tables and compare them with the live ones",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			_, k, _, shutdown, err := c.setup(ctx, cmd, "replay")
			if err != nil {
				return err
			}
			defer shutdown(context.Background())
			pool, err := pg.Open(ctx, pg.Config{URL: c.databaseURL, Schema: scheduler.Schema, MaxConns: 8})
			if err != nil {
				return err
			}
			defer pool.Close()
			out := cmd.OutOrStdout()
			equal := true
			rep, err := scheduler.RebuildInlineProjection(ctx, pool, inline)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "tasks (inline projection): %d tasks from %d events, %d differ%s\n", rep.Tasks, rep.Events, len(rep.Differences),
				map[bool]string{true: " (rebuilt)", false: ""}[inline])
			equal = equal && len(rep.Differences) == 0
			qrep, found, err := replayQuota(ctx, c.databaseURL, inline)
			if err != nil {
				return err
			}
			if found {
				fmt.Fprintf(out, "quota (inline projection): %d aggregates from %d events, %d differ%s\n", qrep.Aggregates, qrep.Events,
					len(qrep.Differences), map[bool]string{true: " (rebuilt)", false: ""}[inline])
				equal = equal && len(qrep.Differences) == 0
			}
			for _, spec := range scheduler.ReplaySpecs(k) {
				spec.Keep = keep
				r, err := projection.Replay(ctx, pool, spec)
				if err != nil {
					return fmt.Errorf("replay %s: %w", spec.Name, err)
				}
				for _, t := range r.Tables {
					fmt.Fprintf(out, "%s: %d records replayed in %s; live %d rows, replay %d rows, %d only live, %d only replay\n",
						t.Live, r.Records, r.Duration.Round(time.Millisecond), t.LiveRows, t.ReplayRows, t.OnlyInLive, t.OnlyInReplay)
					for _, s := range t.Samples {
						fmt.Fprintln(out, "   ", s)
					}
				}
				equal = equal && r.Equal()
			}
			if !equal {
				return errors.New("replay differs from the live projections")
			}
			fmt.Fprintln(out, "all projections equal their replay")
			return nil
		},
	}
	c.flags(cmd)
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the replay tables for inspection")
	cmd.Flags().BoolVar(&inline, "rebuild-inline", false, "also replace the inline projections (tasks, quota tables) with their rebuild from events")
	return cmd
}
