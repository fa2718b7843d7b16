package admission

import (
	"strconv"

	quotav1 "github.com/taskmesh/taskmesh/gen/taskmesh/quota/v1"
	"github.com/taskmesh/taskmesh/services/quota/internal/admission/app"
)

// Names of the embedded defaults: premium tenants queue on 8 GPUs,
// standard tenants on 2, sharing them as one cohort (docs/api/quota.md,
// "Which work waits, and where").
const (
	DefaultCohort      = "tenants"
	HighPriorityQueue  = "tenant-high-priority-queue"
	LowPriorityQueue   = "tenant-low-priority-queue"
	DefaultFlavor      = "default-flavor"
	TierPremium        = "premium"
	TierStandard       = "standard"
	defaultGapOfSeed04 = 3
)

// TierQueues names the LocalQueue GPU work of each tier goes to when it
// names none; an unknown tier is treated as standard.
var TierQueues = map[string]string{
	TierPremium:  HighPriorityQueue,
	TierStandard: LowPriorityQueue,
	"":           LowPriorityQueue,
}

// DefaultDefinitions are recorded at start when their names do not exist
// (origin config): the cohort, its two ClusterQueues, and the LocalQueues
// of the same names, plus the aliases premium and standard.
func DefaultDefinitions() []app.Definition {
	cq := func(gpus string) *quotav1.ClusterQueueSpec {
		return &quotav1.ClusterQueueSpec{
			Cohort: DefaultCohort,
			ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{app.GPUResource},
				Flavors: []*quotav1.FlavorQuotas{{Name: DefaultFlavor,
					Resources: []*quotav1.ResourceQuota{{Name: app.GPUResource, NominalQuota: gpus}}}}}},
			QueueingStrategy: "BestEffortFIFO",
			// Preempt only for a priority gap of 3 or more
			// (docs/decisions/0011-kueue-style-admission.md).
			Preemption: &quotav1.ClusterQueuePreemption{WithinClusterQueue: "LowerPriority",
				ReclaimWithinCohort: "Any", MinPriorityGap: defaultGapOfSeed04},
		}
	}
	// The premium queue is for premium tenants only; the standard one is
	// open to every tier, so a tenant whose tier is unknown still runs.
	lq := func(name, cq string, tiers ...string) app.Definition {
		return app.Definition{Kind: app.KindLocalQueue, Name: name,
			LocalQueue: &quotav1.LocalQueueSpec{ClusterQueue: cq, Tiers: tiers}}
	}
	defs := []app.Definition{
		{Kind: app.KindCohort, Name: DefaultCohort, Cohort: &quotav1.CohortSpec{}},
		{Kind: app.KindClusterQueue, Name: HighPriorityQueue, ClusterQueue: cq("8")},
		{Kind: app.KindClusterQueue, Name: LowPriorityQueue, ClusterQueue: cq("2")},
		lq(HighPriorityQueue, HighPriorityQueue, TierPremium),
		lq(LowPriorityQueue, LowPriorityQueue),
		lq(TierPremium, HighPriorityQueue, TierPremium),
		lq(TierStandard, LowPriorityQueue),
	}
	for _, stage := range PipelineStages {
		name := PipelineQueuePrefix + stage.Name
		defs = append(defs, app.Definition{Kind: app.KindClusterQueue, Name: name, ClusterQueue: PipelineQueue(stage.Name, stage.Cap)},
			lq(name, name))
	}
	return defs
}

// The model-conversion pipeline's stage queues (docs/api/pipeline.md,
// "Pools and caps"): one ClusterQueue per stage, outside every cohort (a
// stage never borrows another's capacity), whose nominal quota of the
// stage's resource is the most of its tasks that run at once; each stage
// task asks for one unit. The LocalQueue of the same name is open to
// every tenant.
const (
	PipelineQueuePrefix    = "pipeline-"
	PipelineResourcePrefix = "taskmesh.io/pipeline-"
)

// PipelineStages are the stages and their default caps.
var PipelineStages = []struct {
	Name string
	Cap  int
}{{"onnx", 4}, {"bie", 2}, {"nef", 4}}

// PipelineQueue is the ClusterQueue spec of a stage with cap concurrent
// tasks.
func PipelineQueue(stage string, cap int) *quotav1.ClusterQueueSpec {
	res := PipelineResourcePrefix + stage
	return &quotav1.ClusterQueueSpec{
		ResourceGroups: []*quotav1.ResourceGroup{{CoveredResources: []string{res},
			Flavors: []*quotav1.FlavorQuotas{{Name: DefaultFlavor,
				Resources: []*quotav1.ResourceQuota{{Name: res, NominalQuota: strconv.Itoa(cap)}}}}}},
		QueueingStrategy: "StrictFIFO",
	}
}
