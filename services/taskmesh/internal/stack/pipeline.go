package stack

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/platform/authn"
	"github.com/taskmesh/taskmesh/services/quota/admission"
)

// setPipelineCaps puts the stage queues of Options.PipelineCaps through
// the quota service's AdmissionService, as an operator would, so a cap
// given at start replaces whatever the queue had.
func (s *Stack) setPipelineCaps(ctx context.Context) error {
	if len(s.opts.PipelineCaps) == 0 {
		return nil
	}
	conn, err := grpc.NewClient(s.QuotaAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := quotav1.NewAdmissionServiceClient(conn)
	stages := make([]string, 0, len(s.opts.PipelineCaps))
	for stage := range s.opts.PipelineCaps {
		stages = append(stages, stage)
	}
	sort.Strings(stages)
	octx := authn.Outgoing(ctx, authn.Principal{Kind: authn.KindAdmin, Subject: "taskmesh-dev"}, s.InternalToken)
	octx, cancel := context.WithTimeout(octx, 30*time.Second)
	defer cancel()
	for _, stage := range stages {
		n := s.opts.PipelineCaps[stage]
		if n < 1 {
			return fmt.Errorf("pipeline cap of %s: %d is not a positive number", stage, n)
		}
		_, err := client.PutClusterQueue(octx, &quotav1.PutClusterQueueRequest{Name: admission.PipelineQueuePrefix + stage,
			Spec: admission.PipelineQueue(stage, n)}, grpc.WaitForReady(true))
		if err != nil {
			return fmt.Errorf("pipeline cap of %s: %w", stage, err)
		}
	}
	return nil
}
