package app

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"google.golang.org/protobuf/proto"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
)

// aggregateOf names a definition's aggregate type.
func aggregateOf(k DefinitionKind) string {
	switch k {
	case KindClusterQueue:
		return AggregateClusterQueue
	case KindCohort:
		return AggregateCohort
	default:
		return AggregateLocalQueue
	}
}

// Put creates or replaces a definition (operators only). The new topology
// is checked by the core's rules first (ErrInvalid wrapping the core's
// error); nothing is recorded when it fails.
func (a *App) Put(ctx context.Context, c Caller, d Definition) (Definition, error) {
	if !c.Operator {
		return Definition{}, ErrPermissionDenied
	}
	if d.Origin == "" {
		d.Origin = OriginAPI
	}
	if d.Kind == KindClusterQueue {
		if IsWorkGroupQueue(d.Name) {
			return Definition{}, fmt.Errorf("%w: cluster queue %q: names starting %s- belong to the GU quotas' WorkGroups, whose queues follow their quota",
				ErrInvalid, d.Name, workGroupQueuePrefix)
		}
		d.ClusterQueue = withDefaults(d.ClusterQueue)
	}
	err := a.store.UpdateDefinitions(ctx, func(tx DefinitionTx) error {
		return a.put(tx, c, d, false)
	})
	if err != nil {
		return Definition{}, err
	}
	a.written()
	a.settle(ctx)
	return d, nil
}

// settleWait bounds how long a definition write waits for the admission
// loop to take it up.
const settleWait = 2 * time.Second

// settle waits, when this instance runs the admission loop, until the
// loop runs on the definitions just committed, so the write's answer shows
// the usage of what it wrote — a new queue's flavors, a changed nominal
// quota — as a read right after it would (docs/api/quota.md#queue-admission).
// A standby instance answers without usage anyway; a loop that does not
// get to it in time leaves the answer with the usage it has.
func (a *App) settle(ctx context.Context) {
	if a.loop == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	if err := a.loop.Sync(ctx); err != nil && !errors.Is(err, ErrNotActive) && a.log != nil {
		a.log.Warn("admission loop did not take up a definition change in time", "err", err)
	}
}

// withDefaults is spec with the documented defaults written out, as
// Kueue's own defaulting does: queueing_strategy BestEffortFIFO and
// preemption Never within the queue and in the cohort. The core reads an
// empty value the same way, so nothing changes but what answers show: the
// policy in force rather than "" and null. spec itself is not modified.
func withDefaults(spec *quotav1.ClusterQueueSpec) *quotav1.ClusterQueueSpec {
	if spec == nil {
		return nil
	}
	spec = proto.CloneOf(spec)
	if spec.QueueingStrategy == "" {
		spec.QueueingStrategy = "BestEffortFIFO"
	}
	if spec.Preemption == nil {
		spec.Preemption = &quotav1.ClusterQueuePreemption{}
	}
	if spec.Preemption.WithinClusterQueue == "" {
		spec.Preemption.WithinClusterQueue = "Never"
	}
	if spec.Preemption.ReclaimWithinCohort == "" {
		spec.Preemption.ReclaimWithinCohort = "Never"
	}
	return spec
}

// put records d in tx; onlyIfAbsent skips an existing name (embedded
// defaults).
func (a *App) put(tx DefinitionTx, c Caller, d Definition, onlyIfAbsent bool) error {
	if err := tx.LockDefinitions(); err != nil {
		return err
	}
	if onlyIfAbsent {
		if _, ok, err := tx.GetDefinition(d.Kind, d.Name); err != nil || ok {
			return err
		}
	}
	if d.Kind != KindLocalQueue {
		defs, err := tx.LoadDefinitions()
		if err != nil {
			return err
		}
		if d.Kind == KindClusterQueue {
			defs.ClusterQueues[d.Name] = d.ClusterQueue
		} else {
			defs.Cohorts[d.Name] = d.Cohort
		}
		if err := a.validate(defs); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	var ev any
	switch d.Kind {
	case KindClusterQueue:
		ev = &quotav1.ClusterQueueDefined{Name: d.Name, Spec: d.ClusterQueue, Origin: d.Origin, Closing: d.Closing, TenantId: d.TenantID}
	case KindCohort:
		ev = &quotav1.CohortDefined{Name: d.Name, Spec: d.Cohort, Origin: d.Origin}
	case KindLocalQueue:
		ev = &quotav1.LocalQueueDefined{Name: d.Name, Spec: d.LocalQueue, Origin: d.Origin}
	}
	return a.record(tx, c, d, false, ev)
}

// record saves d's change as the next event of its aggregate.
func (a *App) record(tx DefinitionTx, c Caller, d Definition, deleted bool, ev any) error {
	agg := aggregateOf(d.Kind)
	v, err := tx.AggregateVersion(agg + "/" + d.Name)
	if err != nil {
		return err
	}
	now := a.now()
	e, err := newEvent(agg, d.Name, v+1, "", c.Actor, c.IP, now, ev)
	if err != nil {
		return err
	}
	return tx.SaveDefinition(d, deleted, now, e)
}

// Delete removes a definition (operators only). A ClusterQueue holding
// admitted workloads, and a cohort some queue or cohort still names, are
// ErrInUse.
func (a *App) Delete(ctx context.Context, c Caller, kind DefinitionKind, name string) error {
	if !c.Operator {
		return ErrPermissionDenied
	}
	if kind == KindClusterQueue && IsWorkGroupQueue(name) {
		// It goes when its GU quota is deleted (or its WorkGroup stops
		// running and its work has ended); deleting it here would only
		// last until the next sync.
		return fmt.Errorf("cluster queue %q is a WorkGroup's: it goes when its GU quota is deleted: %w", name, ErrInUse)
	}
	err := a.store.UpdateDefinitions(ctx, func(tx DefinitionTx) error {
		return a.delete(tx, c, kind, name)
	})
	if err != nil {
		return err
	}
	a.written()
	return nil
}

func (a *App) delete(tx DefinitionTx, c Caller, kind DefinitionKind, name string) error {
	if err := tx.LockDefinitions(); err != nil {
		return err
	}
	d, ok, err := tx.GetDefinition(kind, name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
	}
	var ev any
	switch kind {
	case KindClusterQueue:
		n, err := tx.AdmittedIn(name)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("cluster queue %q has %d admitted workloads: %w", name, n, ErrInUse)
		}
		ev = &quotav1.ClusterQueueDeleted{Name: name}
	case KindCohort:
		defs, err := tx.LoadDefinitions()
		if err != nil {
			return err
		}
		for q, spec := range defs.ClusterQueues {
			if spec.GetCohort() == name {
				return fmt.Errorf("cohort %q still has cluster queue %q: %w", name, q, ErrInUse)
			}
		}
		for ch, spec := range defs.Cohorts {
			if spec.GetParent() == name {
				return fmt.Errorf("cohort %q is the parent of %q: %w", name, ch, ErrInUse)
			}
		}
		ev = &quotav1.CohortDeleted{Name: name}
	case KindLocalQueue:
		ev = &quotav1.LocalQueueDeleted{Name: name}
	}
	return a.record(tx, c, d, true, ev)
}

// written wakes the relay and the loop after a committed change.
func (a *App) written() {
	if a.afterWrite != nil {
		a.afterWrite()
	}
	if a.loop != nil {
		a.loop.Wake()
	}
}

// Get reads one definition the caller may see, a ClusterQueue with its
// defaults written out. Another tenant's WorkGroup queue is ErrNotFound
// with the message of a name nobody defined, so that a tenant cannot tell
// it exists.
func (a *App) Get(ctx context.Context, c Caller, kind DefinitionKind, name string) (Definition, error) {
	d, ok, err := a.store.GetDefinition(ctx, kind, name)
	if err != nil {
		return Definition{}, err
	}
	if !ok || !visibleTo(c, d, nil) {
		return Definition{}, fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
	}
	return shown(d), nil
}

// List reads every definition of kind the caller may see, ClusterQueues
// with their defaults written out.
func (a *App) List(ctx context.Context, c Caller, kind DefinitionKind) ([]Definition, error) {
	ds, err := a.store.ListDefinitions(ctx, kind)
	if err != nil {
		return nil, err
	}
	var queues map[string]Definition
	if kind == KindLocalQueue && !c.Operator {
		// Whose a LocalQueue's ClusterQueue is decides whether it shows.
		cqs, err := a.store.ListDefinitions(ctx, KindClusterQueue)
		if err != nil {
			return nil, err
		}
		queues = make(map[string]Definition, len(cqs))
		for _, q := range cqs {
			queues[q.Name] = q
		}
	}
	out := ds[:0]
	for _, d := range ds {
		if visibleTo(c, d, queues) {
			out = append(out, shown(d))
		}
	}
	return out, nil
}

// visibleTo reports whether caller c may see definition d. Operators see
// every one; a tenant every one but another tenant's WorkGroup queue — a
// ClusterQueue of origin work_group (or of a name in their namespace) that
// is not recorded as its own — and a LocalQueue that admits into one
// (queues: the ClusterQueues by name), so no tenant learns of another's GU
// quotas (docs/api/quota.md#workgroup-queues). Shared queues, the embedded
// ones and those operators define, show to every tenant.
func visibleTo(c Caller, d Definition, queues map[string]Definition) bool {
	if c.Operator {
		return true
	}
	switch d.Kind {
	case KindClusterQueue:
		return ownQueue(c, d.Name, d, true)
	case KindLocalQueue:
		name := d.LocalQueue.GetClusterQueue()
		q, ok := queues[name]
		return ownQueue(c, name, q, ok)
	}
	return true
}

// ownQueue reports whether ClusterQueue name (q, when known) is not
// another tenant's WorkGroup queue for c. A WorkGroup queue's name says
// whose it is only in its plain form, so ownership is what the queue
// records; one that is not defined (any more) belongs to no one c knows.
func ownQueue(c Caller, name string, q Definition, known bool) bool {
	if !IsWorkGroupQueue(name) && (!known || q.Origin != OriginWorkGroup) {
		return true
	}
	return known && q.TenantID != "" && q.TenantID == c.TenantID
}

// shown is d as answers show it: a ClusterQueue's policy in force rather
// than "" and null, whichever way it was recorded — through the API, as an
// embedded default (the pipeline queues) or for a WorkGroup
// (docs/api/quota.md#queue-admission).
func shown(d Definition) Definition {
	if d.Kind == KindClusterQueue {
		d.ClusterQueue = withDefaults(d.ClusterQueue)
	}
	return d
}

// Usage is the live usage of the named queues and cohorts; ok is false
// when this instance's loop is a standby (the definitions are still
// served, without usage).
func (a *App) Usage(queues, cohorts []string) (Usage, bool) {
	if a.loop == nil {
		return Usage{}, false
	}
	return a.loop.usage(queues, cohorts)
}

// ApplyDefaults records each default definition whose name does not exist
// yet (origin config). Existing definitions, changed through the API or
// not, are left alone.
func (a *App) ApplyDefaults(ctx context.Context, defaults []Definition) error {
	c := Caller{Operator: true, Actor: "config"}
	err := a.store.UpdateDefinitions(ctx, func(tx DefinitionTx) error {
		for _, d := range defaults {
			d.Origin = OriginConfig
			if err := a.put(tx, c, d, true); err != nil {
				return fmt.Errorf("default %s %q: %w", d.Kind, d.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	a.written()
	return nil
}

// SyncWorkGroups makes the ClusterQueues of origin work_group follow the
// WorkGroups (docs/api/quota.md#workgroup-queues). groups are the
// WorkGroups that exist, with their status (those Deleted may be left
// out): each Running one has its queue gu-<tenant>-<quota> with its GPUs
// as nominal quota of flavor <machine type>. The queue of a WorkGroup that
// no longer runs — its quota unsubscribed, or a spec change or failure
// making it Creating or Failed — admits nothing new from then on: it is
// deleted when it holds no admitted work, and otherwise closed (nominal
// quota 0, Definition.Closing saying why) until that work has ended, when
// RemoveDrainedQueues deletes it. A WorkGroup that runs again opens its
// queue again.
func (a *App) SyncWorkGroups(ctx context.Context, groups []WorkGroup) error {
	c := workGroupUpkeep
	open := map[string]WorkGroup{}
	stopped := map[string]WorkGroup{}
	for _, g := range groups {
		name := WorkGroupQueue(g.TenantID, g.Quota)
		if g.Status == WorkGroupRunning {
			open[name] = g
			continue
		}
		// Of several WorkGroups behind one name (a quota deleted and one of
		// the same name made since), the one not being deleted says why.
		if s, ok := stopped[name]; !ok || s.deleted() {
			stopped[name] = g
		}
	}
	var kept []string
	err := a.store.UpdateDefinitions(ctx, func(tx DefinitionTx) error {
		kept = kept[:0]
		open := maps.Clone(open) // the queues still to (re)open, this run
		existing, err := tx.ListDefinitions(KindClusterQueue)
		if err != nil {
			return err
		}
		for _, d := range existing {
			if d.Origin != OriginWorkGroup {
				continue
			}
			if g, ok := open[d.Name]; ok {
				// A queue recorded without its tenant is recorded again
				// with it.
				if d.Closing == "" && d.TenantID == g.TenantID && proto.Equal(workGroupSpec(g), d.ClusterQueue) {
					delete(open, d.Name)
				}
				continue // (re)opened below
			}
			g, known := stopped[d.Name]
			removed, err := a.closeWorkGroupQueue(tx, c, d, closingReason(g, known), g.TenantID)
			if err != nil {
				return err
			}
			if !removed {
				kept = append(kept, d.Name)
			}
		}
		for name, g := range open {
			d := Definition{Kind: KindClusterQueue, Name: name, Origin: OriginWorkGroup, ClusterQueue: workGroupSpec(g),
				TenantID: g.TenantID}
			if err := a.put(tx, c, d, false); err != nil {
				return fmt.Errorf("work group queue %q: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(kept) > 0 {
		a.log.Info("work group queues closed until their admitted work ends", "cluster_queues", kept)
	}
	a.written()
	return nil
}

// WorkGroupRunning is the status of a WorkGroup whose GPUs its queue
// admits work to.
const WorkGroupRunning = "Running"

// deleted reports whether the WorkGroup is being deleted or gone: its GU
// quota was unsubscribed.
func (g WorkGroup) deleted() bool { return g.Status == "Deleting" || g.Status == "Deleted" }

// closingReason says why the queue of WorkGroup g (known: g is one of the
// WorkGroups that exist) admits nothing new. A WorkGroup that is gone, or
// going, says the same, so its queue is not recorded again when the
// unsubscription moves on.
func closingReason(g WorkGroup, known bool) string {
	if !known || g.deleted() {
		return "its GU quota was deleted"
	}
	return fmt.Sprintf("the WorkGroup of GU quota %s is %s, not %s", g.Quota, g.Status, WorkGroupRunning)
}

// closeWorkGroupQueue deletes WorkGroup queue d when it holds no admitted
// work (removed), else records it closed for why: every nominal quota 0,
// so the core admits nothing more there while what it admitted runs on
// (docs/api/quota.md#workgroup-queues). tenant, when known, is whose queue
// it is, recorded with it if it was not. A queue closed for the same
// reason already records nothing.
func (a *App) closeWorkGroupQueue(tx DefinitionTx, c Caller, d Definition, why, tenant string) (removed bool, err error) {
	n, err := tx.AdmittedIn(d.Name)
	if err != nil {
		return false, err
	}
	if n == 0 {
		return true, a.delete(tx, c, KindClusterQueue, d.Name)
	}
	if tenant == "" {
		tenant = d.TenantID
	}
	spec := closedSpec(d.ClusterQueue)
	if d.Closing == why && d.TenantID == tenant && proto.Equal(spec, d.ClusterQueue) {
		return false, nil
	}
	d.ClusterQueue, d.Closing, d.TenantID = spec, why, tenant
	return false, a.put(tx, c, d, false)
}

// closedSpec is spec with no quota left: every nominal quota 0 and no
// borrowing or lending limit. Its flavors stay, so the work it admitted
// keeps them.
func closedSpec(spec *quotav1.ClusterQueueSpec) *quotav1.ClusterQueueSpec {
	spec = proto.CloneOf(spec)
	for _, g := range spec.GetResourceGroups() {
		for _, f := range g.GetFlavors() {
			for _, r := range f.GetResources() {
				r.NominalQuota, r.BorrowingLimit, r.LendingLimit = "0", nil, nil
			}
		}
	}
	return spec
}

// QueueReleased tells the app that admitted work left a closing queue
// (the loop's LoopConfig.Released): RemoveDrainedQueues looks for closing
// queues to remove.
func (a *App) QueueReleased() {
	select {
	case a.released <- struct{}{}:
	default:
	}
}

// RemoveDrainedQueues deletes, each time the loop says admitted work left
// a closing queue (QueueReleased), every closing WorkGroup queue that
// holds no admitted work any more, until ctx ends: such a queue goes with
// its last admitted workload rather than at the next WorkGroup sync. A
// failure is logged; the next release, or sync, tries again.
func (a *App) RemoveDrainedQueues(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.released:
		}
		if err := a.removeDrained(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("removing drained work group queues failed; the next sync retries", "err", err)
		}
	}
}

func (a *App) removeDrained(ctx context.Context) error {
	ds, err := a.store.ListDefinitions(ctx, KindClusterQueue)
	if err != nil {
		return err
	}
	var closing []Definition
	for _, d := range ds {
		if d.Origin == OriginWorkGroup && d.Closing != "" {
			closing = append(closing, d)
		}
	}
	if len(closing) == 0 {
		return nil
	}
	c := workGroupUpkeep
	err = a.store.UpdateDefinitions(ctx, func(tx DefinitionTx) error {
		for _, d := range closing {
			d, ok, err := tx.GetDefinition(KindClusterQueue, d.Name)
			if err != nil {
				return err
			}
			if !ok || d.Closing == "" {
				continue // gone, or opened again meanwhile
			}
			// Closed for the same reason again, it is removed if drained
			// and left as it is otherwise.
			if _, err := a.closeWorkGroupQueue(tx, c, d, d.Closing, ""); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	a.written()
	return nil
}

// workGroupSpec is the ClusterQueue of a running WorkGroup.
func workGroupSpec(g WorkGroup) *quotav1.ClusterQueueSpec {
	flavor := g.MachineType
	if flavor == "" {
		flavor = "default-flavor"
	}
	return &quotav1.ClusterQueueSpec{
		ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{GPUResource},
			Flavors: []*quotav1.FlavorQuotas{{Name: flavor, Resources: []*quotav1.ResourceQuota{
				{Name: GPUResource, NominalQuota: fmt.Sprint(g.GPUs)}}}}}},
		QueueingStrategy: "BestEffortFIFO",
		Preemption:       &quotav1.ClusterQueuePreemption{WithinClusterQueue: "LowerPriority", MinPriorityGap: 3},
	}
}
