package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/services/gateway"
)

// gatewayFlags are the flags of `taskmesh gateway`.
type gatewayFlags struct {
	common
	httpAddr, grpcAddr, target, quotaTarget string
	consumersTarget                         string
	fsRoot, fsBaseURL, fsKey                string
	limits                                  rateLimitFlags
	adminKeyFile                            string
	trustedProxies                          []string
	live                                    gateway.LiveConfig
	maxUpload                               int64
	noConsole                               bool
}

func gatewayCommand() *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the gateway: REST API, gRPC front door, authentication",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "gateway", func(ctx context.Context, p *process) error {
				cfg, err := f.config(p)
				if err != nil {
					return err
				}
				return gateway.Run(ctx, cfg)
			})
		},
	}
	f.add(cmd)
	return cmd
}

func (g *gatewayFlags) add(cmd *cobra.Command) {
	g.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&g.httpAddr, "http", "127.0.0.1:8080", "REST address")
	f.StringVar(&g.grpcAddr, "grpc", "127.0.0.1:9090", "gRPC front door address")
	f.StringVar(&g.target, "scheduler", "127.0.0.1:9091", "scheduler's internal gRPC address")
	f.StringVar(&g.quotaTarget, "quota", "", "quota service's internal gRPC address (empty: no quota API)")
	f.StringVar(&g.consumersTarget, "consumers", "", "consumers service's internal gRPC address (empty: no audit log, usage or webhook API)")
	f.StringVar(&g.fsRoot, "objects-fs-root", "", "serve the fs object store at /objects/ from this directory")
	f.StringVar(&g.fsBaseURL, "objects-fs-base-url", "", "public URL of /objects")
	f.StringVar(&g.fsKey, "objects-fs-secret-file", "", "file holding the URL-signing secret")
	f.Int64Var(&g.maxUpload, "pipeline-max-upload-bytes", 1<<30+1<<20, "largest POST /jobs/uploads request")
	f.BoolVar(&g.noConsole, "no-console", false, "do not serve the web console at /ui")
	f.StringVar(&g.adminKeyFile, "admin-key-file", "", "if no usable operator key exists, create one and write it to this file (0600)")
	f.StringSliceVar(&g.trustedProxies, "trusted-proxies", nil,
		"CIDRs of load balancers whose X-Forwarded-For (HTTP) or x-forwarded-for (gRPC) names the client, comma-separated")
	g.limits.add(f)
	f.IntVar(&g.live.MaxStreamsPerTenant, "live-max-streams-per-tenant", 100, "open live task streams (SSE, WebSocket) per tenant on this gateway")
	f.DurationVar(&g.live.IdleTimeout, "live-idle-timeout", 10*time.Minute, "close a live task stream that sent nothing for this long")
}

// config is the gateway's process configuration. Live task streams tail
// the task topic; without brokers they answer 503 (and the admin events
// wait in the gateway's events table).
func (g *gatewayFlags) config(p *process) (gateway.Config, error) {
	live := g.live
	live.Kafka = p.kafka
	cfg := gateway.Config{HTTPAddr: g.httpAddr, GRPCAddr: g.grpcAddr, SchedulerTarget: g.target, QuotaTarget: g.quotaTarget,
		ConsumersTarget: g.consumersTarget,
		InternalToken:   p.internalToken, DatabaseURL: g.databaseURL, AdminKeyFile: g.adminKeyFile, Logger: p.log, Live: live,
		MaxUploadBytes: g.maxUpload, NoConsole: g.noConsole, Events: gateway.EventsConfig{Kafka: p.kafka}}
	if !p.metricsOwnPort {
		cfg.Metrics = p.metrics // else --metrics-addr keeps it off the public port
	}
	var err error
	if cfg.RateLimits, err = g.limits.config(); err != nil {
		return gateway.Config{}, err
	}
	if cfg.TrustedProxies, err = parsePrefixes(g.trustedProxies); err != nil {
		return gateway.Config{}, fmt.Errorf("--trusted-proxies: %w", err)
	}
	if g.fsRoot != "" {
		fs, err := openFS(g.fsRoot, g.fsBaseURL, g.fsKey)
		if err != nil {
			return gateway.Config{}, err
		}
		cfg.Objects = fs.Handler()
	}
	return cfg, nil
}

// parsePrefixes reads CIDRs ("10.0.0.0/8") and bare addresses (one host).
func parsePrefixes(in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range in {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an address", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
