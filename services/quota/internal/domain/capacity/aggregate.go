package capacity

import (
	"fmt"
	"strings"
)

// The functions below let a store keep every aggregate's state in one map
// (by aggregate id) and fold events into it without knowing the types: a
// state is always one of Tenant, Cluster, Quota, RayCluster or WorkGroup,
// chosen by the type the aggregate id names.

// ZeroState returns the state of an aggregate that has no event yet. An
// aggregate id of no known type is an error.
func ZeroState(aggregate string) (any, error) {
	// The type is the id's prefix (tenant/…, quota/…), as TenantAggregate,
	// QuotaAggregate and the others build it.
	typ, _, _ := strings.Cut(aggregate, "/")
	switch typ {
	case "tenant":
		return Tenant{}, nil
	case "cluster":
		return Cluster{}, nil
	case "quota":
		return Quota{}, nil
	case "ray":
		return RayCluster{}, nil
	case "workgroup":
		return WorkGroup{}, nil
	}
	return nil, fmt.Errorf("unknown aggregate %q", aggregate)
}

// StateVersion returns the version of a state ZeroState or Fold returned:
// the version of its last event, 0 when it has none.
func StateVersion(state any) int64 {
	switch x := state.(type) {
	case Tenant:
		return x.Version
	case Cluster:
		return x.Version
	case Quota:
		return x.Version
	case RayCluster:
		return x.Version
	case WorkGroup:
		return x.Version
	}
	return 0
}

// Fold applies e to state, the state of e's aggregate that ZeroState or
// an earlier Fold returned. Anything else is returned unchanged.
func Fold(state any, e Event) any {
	switch x := state.(type) {
	case Tenant:
		return x.Apply(e)
	case Cluster:
		return x.Apply(e)
	case Quota:
		return x.Apply(e)
	case RayCluster:
		return x.Apply(e)
	case WorkGroup:
		return x.Apply(e)
	}
	// Only what ZeroState or Fold returned comes here; anything else is
	// passed back untouched rather than guessed at.
	return state
}
