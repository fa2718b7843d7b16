package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	k8srest "k8s.io/client-go/rest"

	"github.com/taskmesh/taskmesh/services/quota"
)

// quotaFlags are the flags of `taskmesh quota`.
type quotaFlags struct {
	common
	listen, operator, namespace string
	operatorDelay, passInterval time.Duration
}

func quotaCommand() *cobra.Command {
	var f quotaFlags
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Run the quota service (tenants, clusters, CU/GU quotas, Ray WorkGroups, queue admission)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, "quota", func(ctx context.Context, p *process) error {
				cfg, err := f.config(p)
				if err != nil {
					return err
				}
				return quota.Run(ctx, cfg)
			})
		},
	}
	f.flags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:9092", "internal gRPC address")
	fs.StringVar(&f.operator, "operator", "inprocess", "cluster operator: inprocess (embedded default) or kubernetes (MFS custom resources, in-cluster credentials)")
	fs.StringVar(&f.namespace, "operator-namespace", "taskmesh", "kubernetes operator: namespace of the MFS custom resources")
	fs.DurationVar(&f.operatorDelay, "operator-delay", 2*time.Second, "in-process operator: time until a resource runs")
	fs.DurationVar(&f.passInterval, "pass-interval", time.Second, "how often pending productions and unsubscriptions are driven")
	return cmd
}

// config is the quota process's configuration: the quota service and, in
// its own schema, queue admission (ClusterQueues, cohorts, the admission
// loop), which admits GU quota work into the WorkGroups' queues.
func (q *quotaFlags) config(p *process) (quota.ServerConfig, error) {
	if err := p.requireInternalToken(); err != nil {
		return quota.ServerConfig{}, err
	}
	op, err := q.clusterOperator()
	if err != nil {
		return quota.ServerConfig{}, err
	}
	return quota.ServerConfig{
		Service: quota.Config{Kafka: p.kafka, Operator: op, OperatorDelay: q.operatorDelay, PassInterval: q.passInterval,
			Logger: p.log},
		DatabaseURL: q.databaseURL, Listen: q.listen, InternalToken: p.internalToken,
	}, nil
}

// clusterOperator is the operator --operator names; nil is the in-process
// one.
func (q *quotaFlags) clusterOperator() (quota.Operator, error) {
	switch q.operator {
	case "inprocess":
		return nil, nil
	case "kubernetes":
		cfg, err := k8srest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--operator kubernetes runs inside the cluster: %w", err)
		}
		return quota.NewKubernetesOperator(cfg, q.namespace)
	}
	return nil, fmt.Errorf("--operator must be inprocess or kubernetes, not %q", q.operator)
}
