package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/safehttp"
	"github.com/taskmesh/taskmesh/services/executor"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

// devFlags are the flags of `taskmesh dev`.
type devFlags struct {
	o       stack.Options
	logFile string
	noAgent bool
	limits  rateLimitFlags
	video   videoFlags
	// webhookAllow lists networks webhooks may reach although not public.
	webhookAllow []string
	pipe         pipelineFlags
	caps         string
	labels       string
	metrics      metricsFlags
}

func devCommand() *cobra.Command {
	f := devFlags{video: videoFlags{enabled: true}}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of Taskmesh in one process on embedded defaults (Postgres, Kafka broker, object store, agent)",
		Long: `dev runs every service in one process. It starts a Postgres server from the system's
PostgreSQL binaries under the data directory (or uses DATABASE_URL), an embedded
Kafka-protocol broker persisting to the data directory (or TASKMESH_KAFKA_BROKERS),
a filesystem object store and a local executor agent. Stopping and starting again
keeps all data.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			// The log is its owner's alone, as the rest of the data
			// directory is (a log kept from before is made so too).
			logs, err := os.OpenFile(f.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			defer logs.Close()
			if err := logs.Chmod(0o600); err != nil {
				return err
			}
			o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			// No spans are exported; what this installs is the trace
			// propagation and OpenTelemetry's error handler, which sends
			// its errors (a malformed trace header on a request or a
			// record) to this log rather than whole to standard error.
			shutdownTracing, err := otel.Setup(cmd.Context(), otel.Config{Logger: o.Logger})
			if err != nil {
				return err
			}
			defer shutdownTracing(context.Background())
			return f.metrics.serve(cmd.Context(), "dev", o.Logger, func(ctx context.Context, h http.Handler) error {
				o.Metrics = h
				return runDev(ctx, cmd.OutOrStdout(), o, f.logFile)
			})
		},
	}
	f.add(cmd.Flags())
	return cmd
}

func (d *devFlags) add(f *pflag.FlagSet) {
	f.StringVar(&d.o.DataDir, "data-dir", ".taskmesh", "where Postgres, Kafka, objects and credentials are kept")
	f.StringVar(&d.o.HTTPAddr, "http", "127.0.0.1:8080", "REST API address")
	f.StringVar(&d.o.GRPCAddr, "grpc", "127.0.0.1:9090", "gRPC front door address")
	f.IntVar(&d.o.PGPort, "pg-port", 54329, "port of the local Postgres server")
	f.IntVar(&d.o.KafkaPort, "kafka-port", 19092, "port of the embedded Kafka broker")
	f.IntVar(&d.o.AgentSlots, "agent-slots", 4, "concurrent tasks of the local agent")
	f.DurationVar(&d.o.Timing.AgentLostAfter, "agent-lost-after", 15*time.Second,
		"release an agent's leases after this long without heartbeats, counted after a restart from the first agent heard; "+
			"the local agent's tasks outlive a restart of dev for two thirds of it")
	f.BoolVar(&d.noAgent, "no-agent", false, "do not start the local agent")
	f.BoolVar(&d.o.InfraOnly, "infra-only", false, "start only Postgres and the Kafka broker, for services run as separate processes "+
		"(writes <data-dir>/database-url and <data-dir>/kafka-brokers)")
	f.StringVar(&d.o.AgentLocalAPI, "agent-local-api", "127.0.0.1:7071", "the local agent's own REST API (empty: off)")
	f.StringVar(&d.logFile, "log-file", "", "log file (default <data-dir>/taskmesh.log)")
	d.limits.add(f)
	d.video.add(f, false)
	// A development stack listens on loopback and its receivers are on the
	// same machine, so it may call them; the services' own default
	// (taskmesh consumers) allows nothing (docs/api/webhooks.md).
	f.StringSliceVar(&d.webhookAllow, "webhook-allow", devWebhookAllow,
		"networks webhooks may reach although not public (--webhook-allow= allows none)")
	d.pipe.add(f, true)
	f.StringVar(&d.caps, "pipeline-caps", "", "set the pipeline's stage caps at start, e.g. onnx=4,bie=2,nef=4 (default: keep the stage queues as they are)")
	d.metrics.add(f, " (also served at /metrics on --http)")
	f.StringVar(&d.labels, "agent-labels", "pool:onnx,pool:bie,pool:nef", "the local agent's labels (its pipeline pools)")
}

// devWebhookAllow is what a development stack's webhooks may reach besides
// public addresses: receivers on this machine.
var devWebhookAllow = []string{"127.0.0.0/8", "::1/128"}

// options are the stack's options from the flags and the environment
// (DATABASE_URL, TASKMESH_KAFKA_BROKERS); the data directory exists once
// it returns.
func (d *devFlags) options() (stack.Options, error) {
	o := d.o
	o.DatabaseURL = os.Getenv("DATABASE_URL")
	if b := os.Getenv("TASKMESH_KAFKA_BROKERS"); b != "" {
		o.KafkaBrokers = strings.Split(b, ",")
	}
	o.Durable, o.Agent = true, !d.noAgent
	var err error
	if o.RateLimits, err = d.limits.config(); err != nil {
		return o, err
	}
	if o.Video, err = d.video.config(); err != nil {
		return o, err
	}
	if o.Consumers.Webhooks.Allow, err = safehttp.ParseAllow(d.webhookAllow); err != nil {
		return o, fmt.Errorf("--webhook-allow: %w", err)
	}
	if o.Pipeline, err = d.pipe.config(); err != nil {
		return o, err
	}
	if o.PipelineCaps, err = parseCaps(d.caps); err != nil {
		return o, err
	}
	o.AgentLabels = []string{}
	for _, l := range strings.Split(d.labels, ",") {
		if l = strings.TrimSpace(l); l != "" {
			o.AgentLabels = append(o.AgentLabels, l)
		}
	}
	if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
		return o, err
	}
	if d.logFile == "" {
		d.logFile = filepath.Join(o.DataDir, "taskmesh.log")
	}
	return o, nil
}

// runDev starts the stack, prints the banner and runs until ctx is done or
// a component fails.
func runDev(ctx context.Context, out io.Writer, o stack.Options, logFile string) error {
	fmt.Fprintln(out, "starting Taskmesh (data in "+o.DataDir+") …")
	s, err := stack.Start(ctx, o)
	if errors.Is(err, pg.ErrNoBinaries) {
		return fmt.Errorf("%w\n\nOn Debian or Ubuntu: sudo apt-get install -y postgresql", err)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	if o.InfraOnly {
		if err := printInfra(out, s, o.DataDir); err != nil {
			return err
		}
	} else {
		printBanner(out, s, logFile)
	}
	if err := s.Wait(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nstopping Taskmesh …")
	return nil
}

var password = regexp.MustCompile(`://([^:/@]+):[^@]*@`)

func printBanner(w io.Writer, s *stack.Stack, logFile string) {
	fmt.Fprintf(w, `
Taskmesh is running.

  REST API       %[1]s          (OpenAPI: %[1]s/openapi.json)
  Metrics        %[1]s/metrics  (Prometheus)
  gRPC           %[2]s
  Postgres       %[3]s%[9]s
  Kafka          %[4]s          (topic taskmesh.task.events.v1)
  Object store   %[5]s
  Local agent    %[6]s
  Video runner   %[15]s
  Logs           %[7]s
  Demo API key   %[8]s   (tenant "demo")
  Operator key   %[10]s   (admin API: taskmesh ctl tenants|keys)
  Quota cluster  %[11]s   (in-process operator; GPUs per machine type)
  Quota service  %[12]s   (operators: taskmesh ctl quota --quota-server %[12]s --internal-token-file %[13]s)
  Consumers      %[14]s   (audit log, usage, webhooks: taskmesh ctl audit|usage|webhooks)

Try it:
  export TASKMESH_API_KEY=%[8]s
  curl -s -X POST %[1]s/api/v1/tasks -H "Authorization: Bearer $TASKMESH_API_KEY" \
       -H 'Content-Type: application/json' \
       -d '{"name":"hello","type":"shell","command":"echo","args":["hello from taskmesh"]}'
  curl -s %[1]s/api/v1/tasks/<id> -H "Authorization: Bearer $TASKMESH_API_KEY"
  curl -sN %[1]s/api/v1/tasks/<id>/events -H "Authorization: Bearer $TASKMESH_API_KEY"   # live (SSE)
  curl -s %[1]s/api/v1/tasks/<id>/result -H "Authorization: Bearer $TASKMESH_API_KEY"

Press Ctrl-C to stop; data stays in the data directory.
`, s.HTTPURL, s.GRPCAddr, password.ReplaceAllString(s.Postgres, "://$1:***@"), strings.Join(s.Kafka, ","), s.ObjectDir,
		localAgent(s), logFile, s.DemoAPIKey, pgDirNote(s), s.AdminKeyFile, quotaCluster(s),
		s.QuotaAddr, s.InternalTokenFile, s.ConsumersAddr, videoRunner(s.AgentRunning(), executor.VideoRunner))
}

// videoRunner says whether the local agent renders video generations. An
// agent without ffmpeg claims none, and the generations wait QUEUED for one
// that has it; the banner says so, since the agent's log is not where a
// first run looks.
func videoRunner(agent bool, find func(string) (string, error)) string {
	if !agent {
		return "none here (--no-agent)"
	}
	ffmpeg, err := find("")
	if err != nil {
		return "off: ffmpeg is missing, so video generations wait for an agent that has it\n" +
			"                 (apt-get install -y ffmpeg fonts-wqy-zenhei, then start again)"
	}
	return "ffmpeg (" + ffmpeg + ")"
}

// quotaCluster describes the embedded default cluster, e.g. "local A100=16".
func quotaCluster(s *stack.Stack) string {
	types := make([]string, 0, len(s.QuotaInventory))
	for mt, n := range s.QuotaInventory {
		types = append(types, fmt.Sprintf("%s=%d", mt, n))
	}
	sort.Strings(types)
	return strings.TrimSpace(s.QuotaCluster + " " + strings.Join(types, " "))
}

// localAgent describes the local agent: where it runs and its local API,
// or, under --no-agent, the identity an executor started beside dev may
// take.
func localAgent(s *stack.Stack) string {
	if !s.AgentRunning() {
		return fmt.Sprintf("off (--no-agent; an executor may run as %s with the token in %s)", s.AgentID, s.AgentTokenFile())
	}
	api := "off"
	if s.AgentLocalAPI != "" {
		api = "http://" + s.AgentLocalAPI
	}
	return fmt.Sprintf("%s on %s   (its local API: %s)", s.AgentID, s.MachineID, api)
}

// pgDirNote mentions where Postgres keeps its data when it is not under the
// data directory.
func pgDirNote(s *stack.Stack) string {
	if s.PostgresDir == "" || strings.HasPrefix(s.PostgresDir, filepath.Clean(s.DataDir())) {
		return ""
	}
	return "\n                 (data in " + s.PostgresDir + ": the postgres user cannot reach the data directory)"
}

// printInfra writes where the infrastructure of --infra-only listens to
// files the services' flags can read (the database URL holds a password:
// 0600) and prints it.
func printInfra(w io.Writer, s *stack.Stack, dir string) error {
	urlFile, brokersFile := filepath.Join(dir, "database-url"), filepath.Join(dir, "kafka-brokers")
	if err := os.WriteFile(urlFile, []byte(s.Postgres+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(brokersFile, []byte(strings.Join(s.Kafka, ",")+"\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nPostgres and Kafka are running (data in %s).\n\n  Postgres  %s   (URL in %s)\n  Kafka     %s   (in %s)\n\nPress Ctrl-C to stop.\n",
		dir, password.ReplaceAllString(s.Postgres, "://$1:***@"), urlFile, strings.Join(s.Kafka, ","), brokersFile)
	return nil
}
