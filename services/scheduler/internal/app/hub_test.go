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

func TestHubTellsObserversOfEveryChange(t *testing.T) {
	hub := app.NewHub()
	var seen []string
	hub.Observe(func(t domain.Task) { seen = append(seen, t.ID+":"+string(t.Status)) })
	hub.Changed(domain.Task{ID: "a", Status: domain.StatusRunning})
	hub.Changed(domain.Task{ID: "b", Status: domain.StatusCompleted})
	if len(seen) != 2 || seen[0] != "a:running" || seen[1] != "b:completed" {
		t.Errorf("observer saw %v", seen)
	}
}
