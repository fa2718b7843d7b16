package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/pgtest"
	"github.com/taskmesh/taskmesh/services/scheduler"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
)

// Work appearing on one replica wakes the claims waiting on another.
func TestWakeupsCarryWorkToOtherReplicas(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	here, there := app.NewHub(), app.NewHub()
	done := make(chan struct{}, 2)
	for _, h := range []*app.Hub{here, there} {
		w := postgres.Wakeups{DB: db.Open(t, scheduler.Schema)}
		go func() { w.Run(ctx, h); done <- struct{}{} }()
	}
	waiting := there.Wait(app.ClaimWaiter{AgentID: "a-there", Tenant: "*"})
	defer waiting.Stop()
	// LISTEN starts asynchronously: signal until the other replica hears.
	deadline := time.After(10 * time.Second)
	for woken := false; !woken; {
		here.WakeClaimers()
		select {
		case <-waiting.Woken():
			woken = true
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("the other replica's claims were not woken")
		}
	}
	// Its own signal does not come back to the replica that sent it.
	mine := here.Wait(app.ClaimWaiter{AgentID: "a-here", Tenant: "*"})
	defer mine.Stop()
	time.Sleep(100 * time.Millisecond) // the signals of the loop above arrive
	for _, w := range []*app.Waiting{mine, waiting} {
		select {
		case <-w.Woken():
		default:
		}
	}
	here.WakeClaimers()
	select {
	case <-mine.Woken(): // WakeClaimers woke this replica's claims itself, once
	default:
		t.Fatal("WakeClaimers did not wake this replica's claims")
	}
	select {
	case <-waiting.Woken():
	case <-time.After(10 * time.Second):
		t.Fatal("the other replica's claims were not woken")
	}
	select {
	case <-mine.Woken():
		t.Fatal("the replica heard its own signal back and woke its claims again")
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	<-done
	<-done
}
