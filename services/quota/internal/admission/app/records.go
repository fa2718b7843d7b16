package app

import (
	"time"

	"github.com/taskmesh/taskmesh/platform/domain/quantity"
)

// Workload states as recorded in the workloads table.
const (
	StatePending  = "pending"
	StateAdmitted = "admitted"
	StateEvicting = "evicting"
	StateFinished = "finished"
)

// WorkloadRecord is a workload as the loop keeps and records it.
type WorkloadRecord struct {
	Workload
	TenantID string
	// TaskVersion is the task event version that started this stay in the
	// queue; every decision names it.
	TaskVersion int64
	State       string
	Flavors     map[string]string
	Borrowing   bool
	AdmittedAt  time.Time
	// Preemptor is the workload an evicting one makes room for.
	Preemptor string
	// Reason says why a pending workload is outside the core (its queue
	// does not exist) or why it finished.
	Reason string
	// Version is the workload aggregate's version.
	Version int64
}

// FactKind says what a task lifecycle fact does to its workload.
type FactKind string

const (
	// FactQueue starts a new stay with the fact's queue and spec.
	FactQueue FactKind = "queue"
	// FactRequeue starts a new stay with the workload's known spec.
	FactRequeue FactKind = "requeue"
	// FactFinish ends the workload; its usage is freed.
	FactFinish FactKind = "finish"
	// FactDelete ends the workload and forgets it.
	FactDelete FactKind = "delete"
)

// Fact is a task lifecycle fact waiting for the loop.
type Fact struct {
	Seq          int64
	TaskID       string
	TaskVersion  int64
	Kind         FactKind
	TenantID     string
	ClusterQueue string
	Priority     int
	// Created is the task's creation time (zero: keep the known one).
	Created  time.Time
	Requests map[string]int64
	Reason   string
}

// QueueFact is the fact that a task's stay in clusterQueue began at
// version: what its TaskSubmitted (or a TaskUpdated naming a queue) means
// for its workload, whether it comes through the task topic or straight
// from the scheduler (Loop.Queue). created is zero for a stay that keeps
// the task's known creation time.
func QueueFact(taskID string, version int64, tenant, clusterQueue string, taskPriority int32, created time.Time,
	resources map[string]string) Fact {
	reqs, err := quantity.MilliMap(resources)
	if err != nil {
		// The scheduler validated the spec; a bad quantity here is
		// recorded as asking for nothing rather than stalling admission.
		reqs = map[string]int64{}
	}
	return Fact{TaskID: taskID, TaskVersion: version, Kind: FactQueue, TenantID: tenant, ClusterQueue: clusterQueue,
		Priority: WorkloadPriority(taskPriority), Created: created, Requests: reqs}
}

// FinishFact is the fact that a task ended at version for reason
// (succeeded, failed, canceled): its workload's quota is free.
func FinishFact(taskID string, version int64, tenant, reason string) Fact {
	return Fact{TaskID: taskID, TaskVersion: version, Kind: FactFinish, TenantID: tenant, Reason: reason}
}

// WorkloadPriority maps a task priority (1 most important … 10) to
// Kueue's scale, where higher is more important.
func WorkloadPriority(taskPriority int32) int {
	return 11 - int(taskPriority)
}
