package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/otel"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/flagenv"
)

// common are the flags every service shares.
type common struct {
	databaseURL, kafkaBrokers, kafkaSASLMech, kafkaSASLUser, kafkaSASLPassFile string
	kafkaTLSCA                                                                 string
	kafkaTLS                                                                   bool
	internalToken, internalTokenFile                                           string
	otelExporter, otlpEndpoint, logFormat                                      string
	metrics                                                                    metricsFlags
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
	c.metrics.add(f, "")
}

// process is what a service command sets up from the common flags before
// it runs its service.
type process struct {
	log           *slog.Logger
	kafka         kafka.Config
	internalToken string // "" when neither flag nor environment gives one
	// shutdownTracing flushes the trace exporter.
	shutdownTracing func(context.Context) error
	// metrics is the /metrics handler; metricsOwnPort says --metrics-addr
	// serves it already.
	metrics        http.Handler
	metricsOwnPort bool
}

// run applies the environment to the flags not given, sets up the process
// of service and calls serve with it; traces are flushed when serve
// returns.
func (c *common) run(cmd *cobra.Command, service string, serve func(context.Context, *process) error) error {
	ctx := cmd.Context()
	p, err := c.setup(ctx, cmd, service)
	if err != nil {
		return err
	}
	defer p.shutdownTracing(context.Background())
	p.metricsOwnPort = c.metrics.addr != ""
	return c.metrics.serve(ctx, service, p.log, func(ctx context.Context, h http.Handler) error {
		p.metrics = h
		return serve(ctx, p)
	})
}

func (c *common) setup(ctx context.Context, cmd *cobra.Command, service string) (*process, error) {
	if err := flagenv.Apply(cmd.Flags()); err != nil {
		return nil, err
	}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, nil)
	}
	p := &process{log: slog.New(h).With("service", service)}
	var err error
	if p.internalToken, err = flagenv.Secret(c.internalToken, c.internalTokenFile); err != nil {
		return nil, err
	}
	if p.kafka, err = c.kafkaConfig(service); err != nil {
		return nil, err
	}
	p.shutdownTracing, err = otel.Setup(ctx, otel.Config{Exporter: c.otelExporter, OTLPEndpoint: c.otlpEndpoint,
		OTLPInsecure: true, ServiceName: "taskmesh-" + service, Logger: p.log})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (c *common) kafkaConfig(service string) (kafka.Config, error) {
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
			return kafka.Config{}, err
		}
		k.SASL = &kafka.SASLConfig{Mechanism: c.kafkaSASLMech, Username: c.kafkaSASLUser, Password: pass}
	}
	return k, nil
}

// requireInternalToken refuses to start an internal service that would
// refuse every call.
func (p *process) requireInternalToken() error {
	if p.internalToken == "" {
		return errors.New("an internal token is required (--internal-token-file or TASKMESH_INTERNAL_TOKEN)")
	}
	return nil
}
