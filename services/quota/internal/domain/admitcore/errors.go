package admitcore

import (
	"errors"
	"fmt"
)

// Configuration errors. New and Reconfigure return them wrapped in a
// *ConfigError that names the object and field at fault; match them with
// errors.Is.
var (
	// ErrEmptyName: a ClusterQueue, cohort, flavor or resource has no name.
	ErrEmptyName = errors.New("name is empty")
	// ErrDuplicateName: two ClusterQueues (or two cohorts) share a name.
	ErrDuplicateName = errors.New("duplicate name")
	// ErrUnknownCohort: a ClusterQueue or cohort names a cohort that is not
	// configured (also returned by CohortUsage).
	ErrUnknownCohort = errors.New("unknown cohort")
	// ErrCohortCycle: following cohort parents leads back to the start.
	ErrCohortCycle = errors.New("cohort parents form a cycle")
	// ErrInvalidQuantity: a quota is negative or above MaxQuantity.
	ErrInvalidQuantity = errors.New("quantity out of range")
	// ErrLimitWithoutCohort: borrowingLimit or lendingLimit on a node that
	// has nobody to borrow from or lend to (no cohort, no parent).
	ErrLimitWithoutCohort = errors.New("borrowingLimit and lendingLimit need a cohort")
	// ErrLendingAboveNominal: lendingLimit exceeds nominalQuota.
	ErrLendingAboveNominal = errors.New("lendingLimit above nominalQuota")
	// ErrInvalidPolicy: an unknown queueing strategy or preemption policy,
	// or a negative MinPriorityGap.
	ErrInvalidPolicy = errors.New("invalid policy")
	// ErrInvalidResourceGroup: a resource covered twice, a flavor used
	// twice, or a flavor whose resources differ from coveredResources.
	ErrInvalidResourceGroup = errors.New("invalid resource group")
	// ErrQueueInUse: Reconfigure would remove a ClusterQueue that still has
	// admitted workloads; evict or remove them first.
	ErrQueueInUse = errors.New("cluster queue has admitted workloads")
)

// Errors of the mutations (facts) and queries.
var (
	// ErrDuplicate: Enqueue of a workload id the state already holds.
	ErrDuplicate = errors.New("workload already exists")
	// ErrUnknownQueue: the workload's ClusterQueue is not configured.
	ErrUnknownQueue = errors.New("unknown cluster queue")
	// ErrUnknownWorkload: no workload with that id.
	ErrUnknownWorkload = errors.New("unknown workload")
	// ErrInvalidWorkload: empty id or queue, empty resource name, or a
	// request out of range.
	ErrInvalidWorkload = errors.New("invalid workload")
	// ErrNotPending: the workload is admitted where a pending one is needed.
	ErrNotPending = errors.New("workload is not pending")
	// ErrNotAdmitted: the workload is pending where an admitted one is needed.
	ErrNotAdmitted = errors.New("workload is not admitted")
	// ErrAlreadyEvicting: Preempt of a victim that is already being evicted.
	ErrAlreadyEvicting = errors.New("workload is already being evicted")
	// ErrInvalidAssignment: the assignment misses a requested resource,
	// names a flavor the ClusterQueue does not offer for it, splits one
	// resource group over several flavors, or names unrequested resources.
	ErrInvalidAssignment = errors.New("invalid assignment")
	// ErrQuotaExceeded: admitting would exceed a quota or limit; see
	// *QuotaError for which one.
	ErrQuotaExceeded = errors.New("quota exceeded")
)

// ConfigError says which object of a Config is invalid and why.
type ConfigError struct {
	Kind  string // "ClusterQueue" or "Cohort"
	Name  string // the object's name ("" when the name itself is missing)
	Field string // e.g. "resourceGroups[0].flavors[1].resources[0].lendingLimit"
	Err   error  // one of the Err* configuration sentinels
}

func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s %q: %v", e.Kind, e.Name, e.Err)
	}
	return fmt.Sprintf("%s %q: %s: %v", e.Kind, e.Name, e.Field, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// QuotaError is returned by Admit when the assignment does not fit: the
// flavor/resource that is short, what was asked and what is available to
// the ClusterQueue right now (cohort and limits included).
type QuotaError struct {
	Workload  string
	Flavor    string
	Resource  string
	Requested int64
	Available int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("admit %s: %s in flavor %s: requested %d, available %d: %v",
		e.Workload, e.Resource, e.Flavor, e.Requested, e.Available, ErrQuotaExceeded)
}

func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }
