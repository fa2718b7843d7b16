package rest

import (
	"encoding/json"
	"fmt"
	"slices"
)

// kueueField is a field of a Kueue spec that Taskmesh's spec has no place
// for (docs/api/quota.md#kueues-own-fields): Kueue writes or defaults it,
// so a manifest in hand carries it. A value that describes what Taskmesh
// does anyway is dropped before the spec is decoded; any other asks for
// behaviour Taskmesh does not have and is refused, and nothing is
// recorded.
type kueueField struct {
	in    string    // the object of the spec holding the field; "" = the spec itself
	names [2]string // Kueue's camelCase and the snake_case of protobuf JSON
	kinds []string  // the Kueue kinds whose spec has it
	// check says why v is refused; ok when it is dropped. sub names the
	// part of v at fault (".policy"), and got is that part.
	check func(v any) (sub string, got any, why string, ok bool)
}

var kueueFields = []kueueField{
	{names: [2]string{"namespaceSelector", "namespace_selector"}, kinds: []string{"ClusterQueue"}, check: checkNamespaceSelector},
	{in: "preemption", names: [2]string{"borrowWithinCohort", "borrow_within_cohort"}, kinds: []string{"ClusterQueue"},
		check: checkBorrowWithinCohort},
	{names: [2]string{"flavorFungibility", "flavor_fungibility"}, kinds: []string{"ClusterQueue"}, check: checkFlavorFungibility},
	{names: [2]string{"stopPolicy", "stop_policy"}, kinds: []string{"ClusterQueue", "LocalQueue"}, check: checkStopPolicy},
	{names: [2]string{"admissionChecks", "admission_checks"}, kinds: []string{"ClusterQueue"}, check: checkAdmissionChecks},
	{names: [2]string{"admissionChecksStrategy", "admission_checks_strategy"}, kinds: []string{"ClusterQueue"},
		check: checkAdmissionChecksStrategy},
	{names: [2]string{"fairSharing", "fair_sharing"}, kinds: []string{"ClusterQueue", "Cohort", "LocalQueue"}, check: checkFairSharing},
}

// kueueOnlyFields drops from spec, the spec of a kind's object, the
// fields of kueueFields whose values describe what Taskmesh does, and
// spells Kueue's names of kueueRenames as Taskmesh's; dropped reports a
// change. err
// names the first field refused (at is what the spec's fields are under
// in the body: "spec." for a manifest) and says why.
func kueueOnlyFields(spec map[string]any, kind, at string) (dropped bool, err error) {
	for _, f := range kueueFields {
		if !slices.Contains(f.kinds, kind) {
			continue
		}
		obj, path := spec, at
		if f.in != "" {
			obj, _ = spec[f.in].(map[string]any)
			path = at + f.in + "."
		}
		if obj == nil {
			continue
		}
		for _, name := range f.names {
			v, has := obj[name]
			if !has {
				continue
			}
			if v != nil {
				if sub, got, why, ok := f.check(v); !ok {
					return false, fmt.Errorf("invalid %s%s%s: %s: %s", path, name, sub, shown(got), why)
				}
			}
			delete(obj, name)
			dropped = true
		}
	}
	for _, r := range kueueRenames {
		if r.kind != kind {
			continue
		}
		renamed, err := r.apply(spec, at)
		if err != nil {
			return false, err
		}
		dropped = dropped || renamed
	}
	return dropped, nil
}

// kueueRenames are Kueue's names of fields Taskmesh names otherwise: a
// Cohort's parentName is its parent, and v1beta2's cohortName of a
// ClusterQueue is v1beta1's cohort.
var kueueRenames = []kueueRename{
	{kind: "Cohort", names: []string{"parentName", "parent_name"}, to: "parent", what: "the parent"},
	{kind: "ClusterQueue", names: []string{"cohortName", "cohort_name"}, to: "cohort", what: "the cohort"},
}

type kueueRename struct {
	kind  string
	names []string // Kueue's spellings
	to    string   // Taskmesh's name
	what  string   // the value, in an error
}

// apply spells r's names in spec as r.to; two of them naming different
// values are refused.
func (r kueueRename) apply(spec map[string]any, at string) (bool, error) {
	renamed := false
	for _, name := range r.names {
		v, has := spec[name]
		if !has {
			continue
		}
		if p, given := spec[r.to]; given && p != nil && v != nil && shown(p) != shown(v) {
			return false, fmt.Errorf("invalid %s%s: %s: %s is already %s", at, name, shown(v), r.what, shown(p))
		}
		delete(spec, name)
		if v != nil {
			spec[r.to] = v
		}
		renamed = true
	}
	return renamed, nil
}

const whyNamespaces = "Taskmesh has no namespaces, so only {}, every namespace, is accepted; " +
	"a LocalQueue's tenants and tiers say who may submit to a queue"

// checkNamespaceSelector accepts the empty selector, which matches every
// namespace.
func checkNamespaceSelector(v any) (string, any, string, bool) {
	sel, isObj := v.(map[string]any)
	if !isObj {
		return "", v, whyNamespaces, false
	}
	for _, k := range sortedKeys(sel) {
		x := sel[k]
		switch k {
		case "matchLabels", "match_labels":
			if m, isObj := x.(map[string]any); x == nil || isObj && len(m) == 0 {
				continue
			}
		case "matchExpressions", "match_expressions":
			if a, isArr := x.([]any); x == nil || isArr && len(a) == 0 {
				continue
			}
		}
		return "", v, whyNamespaces, false
	}
	return "", nil, "", true
}

// checkBorrowWithinCohort accepts policy Never: work that must borrow
// never preempts in the cohort.
func checkBorrowWithinCohort(v any) (string, any, string, bool) {
	b, isObj := v.(map[string]any)
	if !isObj {
		return "", v, "must be an object with the policy Never", false
	}
	for _, k := range sortedKeys(b) {
		x := b[k]
		switch k {
		case "policy":
			if x == nil || x == "Never" {
				continue
			}
			return ".policy", x, "Taskmesh never preempts in the cohort for work that must borrow; " +
				"only Never, Kueue's default, is accepted", false
		case "maxPriorityThreshold", "max_priority_threshold":
			if x == nil {
				continue
			}
			return "." + k, x, "it applies only to the policy LowerPriority, which Taskmesh does not have", false
		default:
			return "." + k, x, "not a field of Kueue's borrowWithinCohort", false
		}
	}
	return "", nil, "", true
}

// checkFlavorFungibility accepts what the admission core does when a
// flavor cannot fit (services/quota/internal/domain/admitcore, assign):
// the first flavor where the work fits wins, borrowing or not
// (whenCanBorrow Borrow, MayStopSearch in newer Kueue), and preemption
// is chosen only once no flavor fits without it, in the first flavor
// where it could make room (whenCanPreempt TryNextFlavor).
func checkFlavorFungibility(v any) (string, any, string, bool) {
	f, isObj := v.(map[string]any)
	if !isObj {
		return "", v, "must be an object", false
	}
	for _, k := range sortedKeys(f) {
		x := f[k]
		switch k {
		case "whenCanBorrow", "when_can_borrow":
			if x == nil || x == "Borrow" || x == "MayStopSearch" {
				continue
			}
			return "." + k, x, "Taskmesh takes the first flavor the work fits in, borrowing or not; " +
				"only Borrow (MayStopSearch), Kueue's default, is accepted", false
		case "whenCanPreempt", "when_can_preempt":
			if x == nil || x == "TryNextFlavor" {
				continue
			}
			return "." + k, x, "Taskmesh preempts only when no flavor fits without preempting; " +
				"only TryNextFlavor, Kueue's default, is accepted", false
		case "preference":
			if x == nil {
				continue
			}
			return "." + k, x, "Taskmesh prefers flavors in their order only", false
		default:
			return "." + k, x, "not a field of Kueue's flavorFungibility", false
		}
	}
	return "", nil, "", true
}

// checkStopPolicy accepts None: a queue always admits.
func checkStopPolicy(v any) (string, any, string, bool) {
	switch v {
	case "None":
		return "", nil, "", true
	case "Hold", "HoldAndDrain":
		return "", v, "Taskmesh does not stop a queue's admissions; only None, Kueue's default, is accepted", false
	}
	return "", v, "not a stop policy; only None, Kueue's default, is accepted", false
}

const whyAdmissionChecks = "Taskmesh has no admission checks: quota alone admits work"

// checkAdmissionChecks accepts no admission checks.
func checkAdmissionChecks(v any) (string, any, string, bool) {
	if a, isArr := v.([]any); isArr && len(a) == 0 {
		return "", nil, "", true
	}
	return "", v, whyAdmissionChecks, false
}

// checkAdmissionChecksStrategy accepts a strategy without admission
// checks.
func checkAdmissionChecksStrategy(v any) (string, any, string, bool) {
	s, isObj := v.(map[string]any)
	if !isObj {
		return "", v, whyAdmissionChecks, false
	}
	for _, k := range sortedKeys(s) {
		x := s[k]
		if k != "admissionChecks" && k != "admission_checks" {
			return "." + k, x, "not a field of Kueue's admissionChecksStrategy", false
		}
		if x == nil {
			continue
		}
		if sub, got, why, ok := checkAdmissionChecks(x); !ok {
			return "." + k + sub, got, why, false
		}
	}
	return "", nil, "", true
}

// checkFairSharing accepts fairSharing without a weight.
func checkFairSharing(v any) (string, any, string, bool) {
	f, isObj := v.(map[string]any)
	if !isObj {
		return "", v, "must be an object", false
	}
	for _, k := range sortedKeys(f) {
		x := f[k]
		if k == "weight" {
			if x == nil {
				continue
			}
			return ".weight", x, "Taskmesh has no fair sharing: what a queue may borrow is set by its cohort's quotas and limits", false
		}
		return "." + k, x, "not a field of Kueue's fairSharing", false
	}
	return "", nil, "", true
}

// sortedKeys are m's keys in order, so that of several faults the same
// one is named every time.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// shown is v as JSON, cut short.
func shown(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}
