package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"
	k8srest "k8s.io/client-go/rest"

	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/quota/admission"
)

func quotaCommand() *cobra.Command {
	var (
		c                           common
		listen, operator, namespace string
		operatorDelay, passInterval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Run the quota service (tenants, clusters, CU/GU quotas, Ray WorkGroups, queue admission)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log, k, token, shutdown, err := c.setup(ctx, cmd, "quota")
			if err != nil {
				return err
			}
			defer shutdown(context.Background())
			if token == "" {
				return errors.New("an internal token is required (--internal-token-file or TASKMESH_INTERNAL_TOKEN)")
			}
			var op quota.Operator // nil: the in-process one
			switch operator {
			case "inprocess":
			case "kubernetes":
				cfg, err := k8srest.InClusterConfig()
				if err != nil {
					return fmt.Errorf("--operator kubernetes runs inside the cluster: %w", err)
				}
				if op, err = quota.NewKubernetesOperator(cfg, namespace); err != nil {
					return err
				}
			default:
				return fmt.Errorf("--operator must be inprocess or kubernetes, not %q", operator)
			}
			pool, err := pg.Open(ctx, pg.Config{URL: c.databaseURL, Schema: quota.Schema, MaxConns: 16, ApplicationName: "taskmesh-quota"})
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := pg.Migrate(ctx, pool, quota.Schema, quota.Migrations()...); err != nil {
				return err
			}
			svc, err := quota.New(quota.Config{DB: pool, Kafka: k, Operator: op, OperatorDelay: operatorDelay, PassInterval: passInterval, Logger: log})
			if err != nil {
				return err
			}
			// Queue admission (ClusterQueues, cohorts, the admission loop)
			// runs beside it, in its own schema, and admits GU quota work
			// into the WorkGroups' queues.
			apool, err := pg.Open(ctx, pg.Config{URL: c.databaseURL, Schema: admission.Schema, MaxConns: 16, ApplicationName: "taskmesh-admission"})
			if err != nil {
				return err
			}
			defer apool.Close()
			if err := pg.Migrate(ctx, apool, admission.Schema, admission.Migrations()...); err != nil {
				return err
			}
			adm, err := admission.New(admission.Config{DB: apool, Kafka: k, GUQuotas: svc.GUQuotas(), Logger: log})
			if err != nil {
				return err
			}
			srv, err := grpcserver.New(grpcserver.Options{InternalToken: token, Logger: log})
			if err != nil {
				return err
			}
			svc.Register(srv)
			adm.Register(srv)
			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			go func() { <-ctx.Done(); srv.GracefulStop() }()
			go func() {
				if err := svc.Run(ctx); err != nil {
					log.Error("quota service stopped", "err", err)
				}
			}()
			go func() {
				if err := adm.Run(ctx); err != nil && ctx.Err() == nil {
					log.Error("admission stopped", "err", err)
				}
			}()
			go svc.SyncAdmission(ctx, adm)
			log.Info("quota serving", "addr", lis.Addr().String())
			return srv.Serve(lis)
		},
	}
	c.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:9092", "internal gRPC address")
	f.StringVar(&operator, "operator", "inprocess", "cluster operator: inprocess (embedded default) or kubernetes (MFS custom resources, in-cluster credentials)")
	f.StringVar(&namespace, "operator-namespace", "taskmesh", "kubernetes operator: namespace of the MFS custom resources")
	f.DurationVar(&operatorDelay, "operator-delay", 2*time.Second, "in-process operator: time until a resource runs")
	f.DurationVar(&passInterval, "pass-interval", time.Second, "how often pending productions and unsubscriptions are driven")
	return cmd
}

// replayQuota rebuilds the quota service's inline projection from its
// events and compares it with the live tables; found is false when the
// database has no quota schema.
func replayQuota(ctx context.Context, databaseURL string, apply bool) (quota.RebuildReport, bool, error) {
	pool, err := pg.Open(ctx, pg.Config{URL: databaseURL, Schema: quota.Schema, MaxConns: 2})
	if err != nil {
		return quota.RebuildReport{}, false, err
	}
	defer pool.Close()
	var present bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quota.Schema+".quotas").Scan(&present); err != nil || !present {
		return quota.RebuildReport{}, false, err
	}
	rep, err := quota.RebuildInlineProjection(ctx, pool, apply)
	return rep, true, err
}
