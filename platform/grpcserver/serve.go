package grpcserver

import (
	"context"
	"fmt"
	"net"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
)

// DefaultShutdownGrace bounds a graceful stop when the caller gives none:
// calls still in flight after it (claim long polls wait up to 60 s, watch
// streams never end on their own) are cut.
const DefaultShutdownGrace = 10 * time.Second

// Serve serves srv on lis until ctx is done, then stops it: GracefulStop
// refuses new calls at once and lets the ones in flight finish for up to
// grace (DefaultShutdownGrace if grace <= 0), after which Stop cuts the
// rest. It returns nil after a stop caused by ctx, and the error that
// ended serving otherwise (e.g. lis closed under it); srv is stopped in
// both cases.
func Serve(ctx context.Context, srv *grpc.Server, lis net.Listener, grace time.Duration) error {
	addr := lis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		srv.Stop()
		if err == nil {
			// Only a stop ends Serve without an error, and nobody else
			// owns srv: report the early end all the same.
			err = grpc.ErrServerStopped
		}
		return fmt.Errorf("grpc server on %s: %w", addr, err)
	case <-ctx.Done():
	}
	Stop(srv, grace)
	<-served // nil after a stop
	return nil
}

// Stop stops srv gracefully for up to grace (DefaultShutdownGrace if
// grace <= 0), then hard, and returns once srv has stopped.
func Stop(srv *grpc.Server, grace time.Duration) {
	if grace <= 0 {
		grace = DefaultShutdownGrace
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		srv.Stop() // GracefulStop returns too once the calls are cut
		<-stopped
	}
}

// Run serves srv on lis (as Serve does) and runs work beside it until ctx
// is done or either of them fails. Both errors reach the caller, and the
// first failure stops the other.
//
// The server stops first: work's context is cancelled only after srv has
// stopped, so calls still in flight during the graceful stop find the
// service's background work (batching writers, claim wake-ups, the relay)
// still running.
func Run(ctx context.Context, srv *grpc.Server, lis net.Listener, grace time.Duration, work func(context.Context) error) error {
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	group, failed := errgroup.WithContext(ctx)
	group.Go(func() error {
		defer stopWork()
		return Serve(failed, srv, lis, grace)
	})
	group.Go(func() error { return work(workCtx) })
	return group.Wait()
}

// RunWithLocal is Run for a service that also serves callers in its
// process through local. In-process calls stop as network calls do:
// refused from the moment ctx is done or either part fails, and finished
// (or cut after grace) before work's context is cancelled, so none of them
// finds the service's background work stopped under it.
func RunWithLocal(ctx context.Context, srv *grpc.Server, local *Local, lis net.Listener, grace time.Duration,
	work func(context.Context) error) error {
	defer context.AfterFunc(ctx, func() { local.Stop(grace) })()
	err := Run(ctx, srv, lis, grace, func(w context.Context) error {
		run, cancel := context.WithCancel(context.WithoutCancel(w))
		defer cancel()
		defer context.AfterFunc(w, func() { local.Stop(grace); cancel() })()
		return work(run)
	})
	local.Stop(grace) // after a failure too: nothing may call a stopped service
	return err
}
