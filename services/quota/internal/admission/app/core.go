// Package app holds the admission layer's use cases: defining queues and
// cohorts, resolving the queue of a new task, turning task lifecycle facts
// into workloads, running the admission loop around the Kueue-style core,
// and explaining where a task stands.
//
// The core (package domain/admitcore) is pure and in memory; this package
// feeds it recorded facts, persists what it decides as events, and rebuilds
// it from the projection tables after a restart.
package app

import (
	"time"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
)

// Core is the in-memory admission state the loop drives (Kueue's
// scheduler over ClusterQueues and cohorts). It is not safe for concurrent
// use; the loop owns it. Errors are the core's typed errors: the ports map
// its configuration errors to InvalidArgument.
type Core interface {
	// Reconfigure replaces the topology. It fails, changing nothing, when
	// defs are invalid or would drop a queue with admitted workloads.
	Reconfigure(defs Definitions) error
	// Enqueue adds a pending workload; its queue must exist.
	Enqueue(w Workload) error
	// Admit charges a pending workload's requests to flavors.
	Admit(id string, flavors map[string]string) error
	// Preempt marks an admitted workload as being evicted for preemptor:
	// it keeps its usage until Remove.
	Preempt(victim, preemptor string) error
	// Remove forgets a workload, releasing any usage.
	Remove(id string) error
	// Schedule decides, without changing the state, up to max admissions
	// and preemptions at now.
	Schedule(now time.Time, max int) []Decision
	// Explain says where a workload stands.
	Explain(id string) (Explanation, error)
	ClusterQueueUsage(name string) ([]*quotav1.FlavorUsage, error)
	CohortUsage(name string) ([]*quotav1.FlavorUsage, error)
}

// Validator checks a topology the way the core would accept it, without a
// state: API writes are checked before they are recorded.
type Validator func(defs Definitions) error

// NewCore builds an empty core over defs.
type NewCore func(defs Definitions) (Core, error)

// Definitions is the whole topology as recorded: specs by name, and the
// ClusterQueues that are closing (Definition.Closing), by name. The core
// reads the specs only: a closing queue's nominal quota of 0 is what keeps
// it from admitting.
type Definitions struct {
	ClusterQueues map[string]*quotav1.ClusterQueueSpec
	Cohorts       map[string]*quotav1.CohortSpec
	Closing       map[string]string
}

// Workload is a task waiting for, or holding, admission.
type Workload struct {
	ID           string
	ClusterQueue string
	// Priority: higher is more important (11 − task priority).
	Priority int
	Created  time.Time
	// Requests in milli-units by resource name.
	Requests map[string]int64
}

// DecisionKind says what the core decided.
type DecisionKind int

const (
	// DecisionAdmit admits Workload with Flavors.
	DecisionAdmit DecisionKind = iota + 1
	// DecisionPreempt asks Victim to stop so Workload (the preemptor) fits.
	DecisionPreempt
)

// Decision is one outcome of Schedule.
type Decision struct {
	Kind      DecisionKind
	Workload  string
	Flavors   map[string]string
	Borrowing bool
	Victim    string
	Reason    string
}

// Explanation is the core's account of one workload.
type Explanation struct {
	ClusterQueue string
	// State: pending, admitted or evicting.
	State      string
	Position   int
	Reason     string
	Shortages  []*quotav1.ResourceShortage
	BlockedBy  string
	WaitingFor []string
	Flavors    map[string]string
}
