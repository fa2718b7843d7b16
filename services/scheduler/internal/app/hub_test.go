package app_test

import (
	"testing"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestHubWakesClaimsHereAndAsksOnceForTheOtherReplicas(t *testing.T) {
	hub := app.NewHub()
	work := hub.WorkSignal()
	hub.WakeClaimers()
	hub.WakeClaimers() // a burst: one signal to the other replicas
	select {
	case <-work:
	default:
		t.Error("local claims were not woken")
	}
	<-hub.OtherReplicas()
	select {
	case <-hub.OtherReplicas():
		t.Error("a burst asked the other replicas twice")
	default:
	}
	// Another replica's work wakes local claims only.
	work = hub.WorkSignal()
	hub.WakeLocal()
	<-work
	select {
	case <-hub.OtherReplicas():
		t.Error("another replica's signal was sent back out")
	default:
	}
	// A task becoming pending wakes claims; other changes do not.
	work = hub.WorkSignal()
	hub.Changed(domain.Task{ID: "x", Status: domain.StatusRunning})
	select {
	case <-work:
		t.Error("a running task woke claims")
	default:
	}
	hub.Changed(domain.Task{ID: "x", Status: domain.StatusPending})
	<-work
}
