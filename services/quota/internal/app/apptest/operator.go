package apptest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/taskmesh/taskmesh/services/quota/internal/app"
	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Operator is a recording fake of app.Operator. A resource it is asked to
// apply exists at once, Pending, until the test moves it on with
// SetRayPhase or SetWorkGroupPhase; Reject makes applying one refused,
// Fail makes a method fail as a transient error would, and Vanish removes
// a resource behind the service's back. Every call is recorded as
// "<Method> <resource name>". Safe for concurrent use.
type Operator struct {
	mu         sync.Mutex
	calls      []string
	rays       map[string]capacity.Observation // by name
	workGroups map[string]*workGroup           // by name
	reject     map[string]string               // name → reason
	fail       map[string]error                // method → error
}

type workGroup struct {
	spec capacity.WorkGroupSpec
	obs  capacity.Observation
}

var _ app.Operator = (*Operator)(nil)

// NewOperator returns an operator with no resources.
func NewOperator() *Operator {
	return &Operator{rays: map[string]capacity.Observation{}, workGroups: map[string]*workGroup{},
		reject: map[string]string{}, fail: map[string]error{}}
}

// Calls returns every call so far, "<Method> <resource name>", in order.
func (o *Operator) Calls() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls)
}

// Count counts the calls of method so far.
func (o *Operator) Count(method string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.calls {
		if strings.HasPrefix(c, method+" ") {
			n++
		}
	}
	return n
}

// SetRayPhase sets what RayClusterStatus reports for the applied Ray
// cluster name (Running ones get an endpoint).
func (o *Operator) SetRayPhase(name string, phase capacity.Phase, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	obs := capacity.Observation{Phase: phase, Reason: reason}
	if phase == capacity.PhaseRunning {
		obs.Endpoint = "ray://" + name
	}
	o.rays[name] = obs
}

// SetWorkGroupPhase sets what WorkGroupStatus reports for the applied
// WorkGroup name, about the generation last applied.
func (o *Operator) SetWorkGroupPhase(name string, phase capacity.Phase, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w, ok := o.workGroups[name]; ok {
		w.obs = capacity.Observation{Phase: phase, Reason: reason, Generation: w.spec.Generation}
	}
}

// WorkGroup returns the spec the WorkGroup name was last applied with.
func (o *Operator) WorkGroup(name string) (capacity.WorkGroupSpec, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.workGroups[name]
	if !ok {
		return capacity.WorkGroupSpec{}, false
	}
	return w.spec, true
}

// Reject makes applying the resource name fail with
// capacity.ErrOperatorRejected ("" accepts it again).
func (o *Operator) Reject(name, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if reason == "" {
		delete(o.reject, name)
		return
	}
	o.reject[name] = reason
}

// Fail makes every call of method fail with err (nil: succeed again).
func (o *Operator) Fail(method string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.fail, method)
		return
	}
	o.fail[method] = err
}

// Vanish deletes the resource name (a Ray cluster or a WorkGroup) as
// someone with access to the cluster might.
func (o *Operator) Vanish(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.rays, name)
	delete(o.workGroups, name)
}

// call records a call and returns the error it must fail with, if any.
func (o *Operator) call(method, name string) error {
	o.calls = append(o.calls, method+" "+name)
	if err := o.fail[method]; err != nil {
		return err
	}
	if reason, ok := o.reject[name]; ok && strings.HasPrefix(method, "Apply") {
		return fmt.Errorf("%w: %s: %s", capacity.ErrOperatorRejected, name, reason)
	}
	return nil
}

// ApplyRayCluster implements app.Operator.
func (o *Operator) ApplyRayCluster(_ context.Context, spec capacity.RaySpec) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.call("ApplyRayCluster", spec.Name); err != nil {
		return err
	}
	if _, ok := o.rays[spec.Name]; !ok {
		o.rays[spec.Name] = capacity.Observation{Phase: capacity.PhasePending}
	}
	return nil
}

// RayClusterStatus implements app.Operator.
func (o *Operator) RayClusterStatus(_ context.Context, spec capacity.RaySpec) (capacity.Observation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.call("RayClusterStatus", spec.Name); err != nil {
		return capacity.Observation{}, err
	}
	if obs, ok := o.rays[spec.Name]; ok {
		return obs, nil
	}
	return capacity.Observation{Phase: capacity.PhaseAbsent}, nil
}

// ApplyWorkGroup implements app.Operator: a new generation is Pending
// again.
func (o *Operator) ApplyWorkGroup(_ context.Context, spec capacity.WorkGroupSpec) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.call("ApplyWorkGroup", spec.Name); err != nil {
		return err
	}
	if w, ok := o.workGroups[spec.Name]; ok && w.spec.Generation >= spec.Generation {
		return nil
	}
	o.workGroups[spec.Name] = &workGroup{spec: spec,
		obs: capacity.Observation{Phase: capacity.PhasePending, Generation: spec.Generation}}
	return nil
}

// WorkGroupStatus implements app.Operator.
func (o *Operator) WorkGroupStatus(_ context.Context, spec capacity.WorkGroupSpec) (capacity.Observation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.call("WorkGroupStatus", spec.Name); err != nil {
		return capacity.Observation{}, err
	}
	if w, ok := o.workGroups[spec.Name]; ok {
		return w.obs, nil
	}
	return capacity.Observation{Phase: capacity.PhaseAbsent}, nil
}

// DeleteWorkGroup implements app.Operator; a missing WorkGroup is deleted.
func (o *Operator) DeleteWorkGroup(_ context.Context, spec capacity.WorkGroupSpec) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.call("DeleteWorkGroup", spec.Name); err != nil {
		return err
	}
	delete(o.workGroups, spec.Name)
	return nil
}
