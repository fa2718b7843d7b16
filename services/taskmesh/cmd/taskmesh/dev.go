package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/stack"
)

func devCommand() *cobra.Command {
	var (
		o       stack.Options
		logFile string
		noAgent bool
		limits  rateLimitFlags
		video   = videoFlags{enabled: true}
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all of Taskmesh in one process on embedded defaults (Postgres, Kafka broker, object store, agent)",
		Long: `dev runs every service in one process. It starts a Postgres server from the system's
PostgreSQL binaries under the data directory (or uses DATABASE_URL), an embedded
Kafka-protocol broker persisting to the data directory (or TASKMESH_KAFKA_BROKERS),
a filesystem object store and a local executor agent. Stopping and starting again
keeps all data.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.DatabaseURL = os.Getenv("DATABASE_URL")
			if b := os.Getenv("TASKMESH_KAFKA_BROKERS"); b != "" {
				o.KafkaBrokers = strings.Split(b, ",")
			}
			o.Durable, o.Agent = true, !noAgent
			var err error
			if o.RateLimits, err = limits.config(); err != nil {
				return err
			}
			if o.Video, err = video.config(); err != nil {
				return err
			}
			if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
				return err
			}
			if logFile == "" {
				logFile = filepath.Join(o.DataDir, "taskmesh.log")
			}
			lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			defer lf.Close()
			o.Logger = slog.New(slog.NewTextHandler(lf, &slog.HandlerOptions{Level: slog.LevelInfo}))
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, "starting Taskmesh (data in "+o.DataDir+") …")
			s, err := stack.Start(cmd.Context(), o)
			if errors.Is(err, pg.ErrNoBinaries) {
				return fmt.Errorf("%w\n\nOn Debian or Ubuntu: sudo apt-get install -y postgresql", err)
			}
			if err != nil {
				return err
			}
			defer s.Close()
			printBanner(out, s, logFile)
			if err := s.Wait(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintln(out, "\nstopping Taskmesh …")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.DataDir, "data-dir", ".taskmesh", "where Postgres, Kafka, objects and credentials are kept")
	f.StringVar(&o.HTTPAddr, "http", "127.0.0.1:8080", "REST API address")
	f.StringVar(&o.GRPCAddr, "grpc", "127.0.0.1:9090", "gRPC front door address")
	f.IntVar(&o.PGPort, "pg-port", 54329, "port of the local Postgres server")
	f.IntVar(&o.KafkaPort, "kafka-port", 19092, "port of the embedded Kafka broker")
	f.IntVar(&o.AgentSlots, "agent-slots", 4, "concurrent tasks of the local agent")
	f.BoolVar(&noAgent, "no-agent", false, "do not start the local agent")
	f.StringVar(&o.AgentLocalAPI, "agent-local-api", "127.0.0.1:7071", "the local agent's own REST API (empty: off)")
	f.StringVar(&logFile, "log-file", "", "log file (default <data-dir>/taskmesh.log)")
	limits.add(f)
	video.add(f, false)
	return cmd
}

var password = regexp.MustCompile(`://([^:/@]+):[^@]*@`)

func printBanner(w io.Writer, s *stack.Stack, logFile string) {
	fmt.Fprintf(w, `
Taskmesh is running.

  REST API       %[1]s          (OpenAPI: %[1]s/openapi.json)
  gRPC           %[2]s
  Postgres       %[3]s%[11]s
  Kafka          %[4]s          (topic taskmesh.task.events.v1)
  Object store   %[5]s
  Local agent    %[6]s on %[7]s   (its local API: %[10]s)
  Logs           %[8]s
  Demo API key   %[9]s   (tenant "demo")
  Operator key   %[12]s   (admin API: taskmesh ctl tenants|keys)
  Quota cluster  %[13]s   (in-process operator; GPUs per machine type)
  Quota service  %[14]s   (operators: taskmesh ctl quota --quota-server %[14]s --internal-token-file %[15]s)

Try it:
  export TASKMESH_API_KEY=%[9]s
  curl -s -X POST %[1]s/api/v1/tasks -H "Authorization: Bearer $TASKMESH_API_KEY" \
       -H 'Content-Type: application/json' \
       -d '{"name":"hello","type":"shell","command":"echo","args":["hello from taskmesh"]}'
  curl -s %[1]s/api/v1/tasks/<id> -H "Authorization: Bearer $TASKMESH_API_KEY"
  curl -sN %[1]s/api/v1/tasks/<id>/events -H "Authorization: Bearer $TASKMESH_API_KEY"   # live (SSE)
  curl -s %[1]s/api/v1/tasks/<id>/result -H "Authorization: Bearer $TASKMESH_API_KEY"

Press Ctrl-C to stop; data stays in the data directory.
`, s.HTTPURL, s.GRPCAddr, password.ReplaceAllString(s.Postgres, "://$1:***@"), strings.Join(s.Kafka, ","), s.ObjectDir,
		s.AgentID, s.MachineID, logFile, s.DemoAPIKey, agentAPI(s), pgDirNote(s), s.AdminKeyFile, quotaCluster(s),
		s.QuotaAddr, s.InternalTokenFile)
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

func agentAPI(s *stack.Stack) string {
	if s.AgentLocalAPI == "" {
		return "off"
	}
	return "http://" + s.AgentLocalAPI
}

// pgDirNote mentions where Postgres keeps its data when it is not under the
// data directory.
func pgDirNote(s *stack.Stack) string {
	if s.PostgresDir == "" || strings.HasPrefix(s.PostgresDir, filepath.Clean(s.DataDir())) {
		return ""
	}
	return "\n                 (data in " + s.PostgresDir + ": the postgres user cannot reach the data directory)"
}
