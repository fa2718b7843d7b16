package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/taskmesh/taskmesh/platform/safehttp"
	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/taskmesh/internal/flagenv"
)

// consumersFlags are the flags of `taskmesh consumers`.
type consumersFlags struct {
	common
	listen                    string
	objects                   objectFlags
	retention                 string
	archive, compress         bool
	pricesFile                string
	webhookKeyFile            string
	webhookAllow              []string
	webhookTimeout            time.Duration
	webhookPerTenant, workers int
}

func consumersCommand() *cobra.Command {
	var f consumersFlags
	cmd := &cobra.Command{
		Use:   "consumers",
		Short: "Run the consumers service (audit log, usage metering, webhook notifications)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "consumers", func(ctx context.Context, p *process) error {
				cfg, err := f.config(ctx, p)
				if err != nil {
					return err
				}
				return consumers.Run(ctx, cfg)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func (c *consumersFlags) add(cmd *cobra.Command) {
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&c.listen, "listen", "127.0.0.1:9093", "internal gRPC address")
	c.objects.add(cmd)
	f.StringVar(&c.retention, "audit-retention", "90d", "how long audit entries stay in the database (e.g. 90d, 36h)")
	f.BoolVar(&c.archive, "audit-archive", true, "archive expired audit entries to the object store (--objects) before deleting them")
	f.BoolVar(&c.compress, "audit-compress", true, "gzip the audit archives")
	f.StringVar(&c.pricesFile, "usage-prices", "", "price table file (YAML or JSON, docs/api/usage.md); empty: the defaults")
	f.StringVar(&c.webhookKeyFile, "webhook-key-file", "", "file holding the hex key (32 bytes) that seals tenants' webhook secrets (required)")
	f.StringSliceVar(&c.webhookAllow, "webhook-allow", nil, "networks webhooks may reach although not public (e.g. 10.20.0.0/16)")
	f.DurationVar(&c.webhookTimeout, "webhook-timeout", 10*time.Second, "timeout of one webhook delivery")
	f.IntVar(&c.webhookPerTenant, "webhook-per-tenant", 8, "webhook deliveries in flight per tenant")
	f.IntVar(&c.workers, "webhook-concurrency", 256, "webhook deliveries in flight in all")
}

// config is the consumers service's process configuration.
func (c *consumersFlags) config(ctx context.Context, p *process) (consumers.ServerConfig, error) {
	if err := p.requireInternalToken(); err != nil {
		return consumers.ServerConfig{}, err
	}
	objects, err := c.objects.open(ctx)
	if err != nil {
		return consumers.ServerConfig{}, err
	}
	keep, err := consumers.ParseRetention(c.retention)
	if err != nil {
		return consumers.ServerConfig{}, fmt.Errorf("--audit-retention: %w", err)
	}
	prices, err := loadPrices(c.pricesFile)
	if err != nil {
		return consumers.ServerConfig{}, err
	}
	hooks, err := webhookConfig(c.webhookKeyFile, c.webhookAllow)
	if err != nil {
		return consumers.ServerConfig{}, err
	}
	hooks.Timeout, hooks.PerTenant, hooks.Concurrency = c.webhookTimeout, c.webhookPerTenant, c.workers
	return consumers.ServerConfig{
		Service: consumers.Config{Kafka: p.kafka, Objects: objects, Prices: prices, Webhooks: hooks, Logger: p.log,
			Audit: consumers.AuditConfig{Retention: consumers.Retention{Keep: keep, Archive: c.archive, Compress: c.compress}}},
		DatabaseURL: c.databaseURL, Listen: c.listen, InternalToken: p.internalToken,
	}, nil
}

// loadPrices reads a price table; "" is the defaults.
func loadPrices(path string) (*consumers.Prices, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := consumers.DefaultPrices
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		return nil, fmt.Errorf("--usage-prices %s: %w", path, err)
	}
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("--usage-prices %s: %w", path, err)
	}
	return &p, nil
}

// webhookConfig reads the sealing key and the allow-list.
func webhookConfig(keyFile string, allow []string) (consumers.WebhookConfig, error) {
	var cfg consumers.WebhookConfig
	if keyFile == "" {
		return cfg, fmt.Errorf("--webhook-key-file is required: it seals tenants' webhook secrets")
	}
	secret, err := flagenv.Secret("", keyFile)
	if err != nil {
		return cfg, err
	}
	if cfg.Key, err = hex.DecodeString(strings.TrimSpace(secret)); err != nil || len(cfg.Key) != consumers.WebhookKeySize {
		return cfg, fmt.Errorf("--webhook-key-file: want %d bytes as hex (openssl rand -hex %d)", consumers.WebhookKeySize, consumers.WebhookKeySize)
	}
	if cfg.Allow, err = safehttp.ParseAllow(allow); err != nil {
		return cfg, fmt.Errorf("--webhook-allow: %w", err)
	}
	return cfg, nil
}
