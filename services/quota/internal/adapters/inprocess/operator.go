// Package inprocess is the cluster operator of the embedded default: it
// keeps Ray clusters and WorkGroups in memory, reports them Running a
// configurable delay after they were applied, and can be told to fail
// (for tests and demos). It stands in for the Kubernetes operator when
// there is no cluster; its resources live as long as the process, like a
// real cluster's outlive the quota service.
package inprocess

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/taskmesh/taskmesh/services/quota/internal/domain/capacity"
)

// Config tunes the operator.
type Config struct {
	// Delay between applying a resource and reporting it Running.
	Delay time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnChange, if set, is called when a resource may have changed phase
	// (after Delay): the process manager's Wake.
	OnChange func()
}

type resource struct {
	spec       any
	generation int64
	readyAt    time.Time
	failReason string
}

// Operator is the in-process cluster operator. Safe for concurrent use.
type Operator struct {
	cfg Config

	mu         sync.Mutex
	rays       map[string]*resource // by name
	workGroups map[string]*resource // by name
	failRay    map[string]string    // name → reason when applied
	failWG     map[string]string    // quota name → reason
	reject     map[string]string    // name → reason: the resource is refused
	counts     Counts
}

// Counts says what the operator did: resources created (not updates or
// repeated applies of an existing one) and deleted.
type Counts struct {
	RayCreated, WorkGroupCreated, WorkGroupUpdated, WorkGroupDeleted int
}

// New returns an operator.
func New(cfg Config) *Operator {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Operator{cfg: cfg, rays: map[string]*resource{}, workGroups: map[string]*resource{},
		failRay: map[string]string{}, failWG: map[string]string{}, reject: map[string]string{}}
}

// FailRayCluster makes the Ray cluster of that name fail with reason once
// applied.
func (o *Operator) FailRayCluster(name, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failRay[name] = reason
}

// FailWorkGroup makes the WorkGroups of the quota named quotaName fail
// with reason once applied ("" stops failing them; applying again then
// recovers).
func (o *Operator) FailWorkGroup(quotaName, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if reason == "" {
		delete(o.failWG, quotaName)
		return
	}
	o.failWG[quotaName] = reason
}

// Reject makes applying the resource of that name fail with
// capacity.ErrOperatorRejected (as when its custom resource definition is
// not installed).
func (o *Operator) Reject(name, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reject[name] = reason
}

// Counts returns what the operator did so far.
func (o *Operator) Counts() Counts {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts
}

// WorkGroup returns the spec the WorkGroup of that name was last applied
// with.
func (o *Operator) WorkGroup(name string) (capacity.WorkGroupSpec, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.workGroups[name]
	if !ok {
		return capacity.WorkGroupSpec{}, false
	}
	return r.spec.(capacity.WorkGroupSpec), true
}

// RayCluster returns the spec the Ray cluster of that name was applied with.
func (o *Operator) RayCluster(name string) (capacity.RaySpec, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.rays[name]
	if !ok {
		return capacity.RaySpec{}, false
	}
	return r.spec.(capacity.RaySpec), true
}

func (o *Operator) later() time.Time {
	at := o.cfg.Now().Add(o.cfg.Delay)
	if o.cfg.OnChange != nil {
		time.AfterFunc(o.cfg.Delay+time.Millisecond, o.cfg.OnChange)
	}
	return at
}

// ApplyRayCluster implements app.Operator.
func (o *Operator) ApplyRayCluster(_ context.Context, spec capacity.RaySpec) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if reason, ok := o.reject[spec.Name]; ok {
		return fmt.Errorf("%w: Ray cluster %s: %s", capacity.ErrOperatorRejected, spec.Name, reason)
	}
	if r, ok := o.rays[spec.Name]; ok && r.failReason == "" {
		return nil
	}
	o.rays[spec.Name] = &resource{spec: spec, readyAt: o.later(), failReason: o.failRay[spec.Name]}
	o.counts.RayCreated++
	return nil
}

// RayClusterStatus implements app.Operator.
func (o *Operator) RayClusterStatus(_ context.Context, spec capacity.RaySpec) (capacity.Observation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.rays[spec.Name]
	if !ok {
		return capacity.Observation{Phase: capacity.PhaseAbsent}, nil
	}
	return o.phase(r, "ray://"+spec.Name+"."+spec.Cluster+":10001"), nil
}

func (o *Operator) phase(r *resource, endpoint string) capacity.Observation {
	switch {
	case o.cfg.Now().Before(r.readyAt):
		return capacity.Observation{Phase: capacity.PhasePending, Generation: r.generation}
	case r.failReason != "":
		return capacity.Observation{Phase: capacity.PhaseFailed, Reason: r.failReason, Generation: r.generation}
	}
	return capacity.Observation{Phase: capacity.PhaseRunning, Generation: r.generation, Endpoint: endpoint}
}

// ApplyWorkGroup implements app.Operator: the WorkGroup's Ray cluster must
// exist.
func (o *Operator) ApplyWorkGroup(_ context.Context, spec capacity.WorkGroupSpec) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if reason, ok := o.reject[spec.Name]; ok {
		return fmt.Errorf("%w: WorkGroup %s: %s", capacity.ErrOperatorRejected, spec.Name, reason)
	}
	if _, ok := o.rays[spec.RayCluster]; !ok {
		return fmt.Errorf("WorkGroup %s: Ray cluster %s does not exist", spec.Name, spec.RayCluster)
	}
	r, ok := o.workGroups[spec.Name]
	if ok && r.generation >= spec.Generation {
		return nil
	}
	if ok {
		o.counts.WorkGroupUpdated++
	} else {
		o.counts.WorkGroupCreated++
	}
	o.workGroups[spec.Name] = &resource{spec: spec, generation: spec.Generation, readyAt: o.later(), failReason: o.failWG[spec.QuotaName]}
	return nil
}

// WorkGroupStatus implements app.Operator.
func (o *Operator) WorkGroupStatus(_ context.Context, spec capacity.WorkGroupSpec) (capacity.Observation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.workGroups[spec.Name]
	if !ok {
		return capacity.Observation{Phase: capacity.PhaseAbsent}, nil
	}
	return o.phase(r, ""), nil
}

// DeleteWorkGroup implements app.Operator; a missing WorkGroup is deleted.
func (o *Operator) DeleteWorkGroup(_ context.Context, spec capacity.WorkGroupSpec) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.workGroups[spec.Name]; ok {
		delete(o.workGroups, spec.Name)
		o.counts.WorkGroupDeleted++
	}
	return nil
}

// RemoveWorkGroup deletes a WorkGroup behind the quota service's back (as
// someone with cluster access might), for tests of "already gone".
func (o *Operator) RemoveWorkGroup(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.workGroups, name)
}
