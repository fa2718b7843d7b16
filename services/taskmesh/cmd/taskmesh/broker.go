package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/platform/kafka"
)

// brokerCommand runs the embedded Kafka-protocol broker on its own, as a
// process of its own: the chaos suite (docs/chaos.md) kills, stops and
// restarts it like any other service. Records and committed offsets
// persist in --data-dir, so a restarted broker continues where it was.
func brokerCommand() *cobra.Command {
	var (
		opts kafka.EmbeddedOptions
		addr string
	)
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the embedded Kafka-protocol broker as a process of its own (a persistent data directory)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.DataDir == "" {
				return fmt.Errorf("--data-dir is required: the broker keeps its records there across restarts")
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("service", "broker")
			opts.Logf = func(format string, args ...any) { log.Warn(strings.TrimSpace(fmt.Sprintf(format, args...))) }
			b, err := kafka.StartEmbedded(opts)
			if err != nil {
				return err
			}
			defer b.Close()
			addr = strings.Join(b.Addrs(), ",")
			fmt.Fprintln(cmd.OutOrStdout(), "broker listening on", addr)
			<-cmd.Context().Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DataDir, "data-dir", "", "where records, topics and committed offsets persist (required)")
	f.IntVar(&opts.Port, "port", 19092, "TCP port on 127.0.0.1")
	f.BoolVar(&opts.SyncWrites, "sync-writes", false, "fsync every batch (survives an OS crash, slower)")
	f.Int32Var(&opts.Partitions, "partitions", 16, "partitions of auto-created topics")
	return cmd
}
