package domain

import (
	"fmt"
	"slices"
	"strings"
)

// Generation types.
const (
	TextToVideo  = "text_to_video"
	ImageToVideo = "image_to_video"
)

// Resolution tiers and the 16:9 size of each: a text_to_video is exactly
// that size, an image_to_video has about as many pixels in its image's
// aspect ratio (the tier sets the total pixels, not the shape).
var tierSizes = map[string][2]int{
	"480P":  {832, 480},
	"720P":  {1280, 720},
	"1080P": {1920, 1080},
}

// Model is a video model the API offers.
type Model struct {
	// ID is what requests name, e.g. wan2.2-t2v.
	ID string
	// DisplayName is what answers show, e.g. Wan2.2-T2V-14B.
	DisplayName string
	// Type is the one generation type the model makes.
	Type string
	// Resolutions it accepts and the one used when the request names none.
	Resolutions       []string
	DefaultResolution string
	// Durations in seconds it accepts; a request may omit duration and get
	// DefaultDuration.
	Durations       []int
	DefaultDuration int
	// FPS: a video of d seconds has d*FPS+1 frames (Wan's WAN_FRAME_NUM is
	// 81 for 5 s at 16 fps).
	FPS int
	// GPUs is the nvidia.com/gpu quantity one generation requests.
	GPUs string
}

// DefaultModels are the models offered out of the box
// (docs/api/video.md#the-request: wan2.2, 480P/720P/1080P with 480P by
// default, 5-second videos, two GPUs per job as in its PyTorchJob
// template).
func DefaultModels() []Model {
	wan := func(id, name, typ string) Model {
		return Model{ID: id, DisplayName: name, Type: typ, Resolutions: []string{"480P", "720P", "1080P"},
			DefaultResolution: "480P", Durations: []int{5}, DefaultDuration: 5, FPS: 16, GPUs: "2"}
	}
	return []Model{wan("wan2.2-t2v", "Wan2.2-T2V-14B", TextToVideo), wan("wan2.2-i2v", "Wan2.2-I2V-14B", ImageToVideo)}
}

// Catalog is the configured set of models.
type Catalog struct{ models []Model }

// NewCatalog checks the models and fills their defaults (display name = ID,
// resolutions as wan2.2, duration 5, 16 fps, 2 GPUs).
func NewCatalog(models []Model) (Catalog, error) {
	if len(models) == 0 {
		return Catalog{}, fmt.Errorf("video: no models configured")
	}
	seen := map[string]bool{}
	out := make([]Model, 0, len(models))
	for _, m := range models {
		switch {
		case m.ID == "":
			return Catalog{}, fmt.Errorf("video: a model has no id")
		case seen[m.ID]:
			return Catalog{}, fmt.Errorf("video: model %s is configured twice", m.ID)
		case m.Type != TextToVideo && m.Type != ImageToVideo:
			return Catalog{}, fmt.Errorf("video: model %s: type must be %s or %s, not %q", m.ID, TextToVideo, ImageToVideo, m.Type)
		}
		seen[m.ID] = true
		if m.DisplayName == "" {
			m.DisplayName = m.ID
		}
		if len(m.Resolutions) == 0 {
			m.Resolutions = []string{"480P", "720P", "1080P"}
		}
		for _, r := range m.Resolutions {
			if _, ok := tierSizes[r]; !ok {
				return Catalog{}, fmt.Errorf("video: model %s: unknown resolution %q (480P, 720P or 1080P)", m.ID, r)
			}
		}
		// Defaults are filled and checked when the catalog is built, so
		// Normalize can trust every model it finds.
		if m.DefaultResolution == "" {
			m.DefaultResolution = m.Resolutions[0]
		}
		if !slices.Contains(m.Resolutions, m.DefaultResolution) {
			return Catalog{}, fmt.Errorf("video: model %s: default resolution %s is not one of its resolutions", m.ID, m.DefaultResolution)
		}
		if len(m.Durations) == 0 {
			m.Durations = []int{5}
		}
		if m.DefaultDuration == 0 {
			m.DefaultDuration = m.Durations[0]
		}
		if !slices.Contains(m.Durations, m.DefaultDuration) {
			return Catalog{}, fmt.Errorf("video: model %s: default duration %d is not one of its durations", m.ID, m.DefaultDuration)
		}
		for _, d := range m.Durations {
			// The task's own bounds (a video task's duration is 1 to 60
			// seconds): a model configured beyond them would make tasks the
			// scheduler refuses.
			if d < 1 || d > 60 {
				return Catalog{}, fmt.Errorf("video: model %s: duration %d is outside 1 to 60 seconds", m.ID, d)
			}
		}
		if m.FPS == 0 {
			m.FPS = 16
		}
		if m.GPUs == "" {
			m.GPUs = "2"
		}
		out = append(out, m)
	}
	return Catalog{models: out}, nil
}

// Model returns the model named id.
func (c Catalog) Model(id string) (Model, bool) {
	for _, m := range c.models {
		if m.ID == id {
			return m, true
		}
	}
	return Model{}, false
}

// Resolve finds the model a request names. Besides its id (wan2.2-t2v) a
// request may name a model by its display name, the name answers show
// (Wan2.2-T2V-14B), in any case; or by its family, the id without its last
// part (wan2.2), in which case the generation type picks the family's
// model: typ when given, else image_to_video when the request carries an
// image and text_to_video when it does not.
func (c Catalog) Resolve(name, typ string, image bool) (Model, bool) {
	if m, ok := c.Model(name); ok {
		return m, true
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return Model{}, false
	}
	for _, m := range c.models {
		if strings.EqualFold(m.ID, name) || strings.EqualFold(m.DisplayName, name) {
			return m, true
		}
	}
	if typ == "" {
		typ = TextToVideo
		if image {
			typ = ImageToVideo
		}
	}
	var family []Model
	for _, m := range c.models {
		if i := strings.LastIndex(m.ID, "-"); i > 0 && strings.EqualFold(m.ID[:i], name) {
			family = append(family, m)
		}
	}
	for _, m := range family {
		if m.Type == typ {
			return m, true
		}
	}
	if len(family) == 1 {
		// The family's one model; a type it does not make is refused by
		// Normalize, naming the type.
		return family[0], true
	}
	return Model{}, false
}

// IDs lists the model ids, for messages.
func (c Catalog) IDs() string {
	ids := make([]string, len(c.models))
	for i, m := range c.models {
		ids[i] = m.ID
	}
	return strings.Join(ids, ", ")
}

// DisplayName is the name answers show for model id: its display name, or
// the id itself once the model is no longer configured.
func (c Catalog) DisplayName(id string) string {
	if m, ok := c.Model(id); ok {
		return m.DisplayName
	}
	return id
}

// Route is where a tier's generations queue.
type Route struct {
	Queue    string
	Priority int
}

// DefaultRoutes are the documented queues (docs/api/video.md#routing):
// premium tenants in tenant-high-priority-queue at priority 2, standard
// ones in tenant-low-priority-queue at priority 5 — a gap of 3, so the
// admission's minimum priority gap for preemption
// (docs/api/quota.md#which-work-waits-and-where) lets premium work preempt
// standard work.
func DefaultRoutes() map[string]Route {
	return map[string]Route{
		"premium":  {Queue: "tenant-high-priority-queue", Priority: 2},
		"standard": {Queue: "tenant-low-priority-queue", Priority: 5},
	}
}

// Routing picks a route by tier; tiers it does not know use Default's.
type Routing struct {
	Routes  map[string]Route
	Default string
}

// For returns the route of tier.
func (r Routing) For(tier string) Route {
	if route, ok := r.Routes[tier]; ok {
		return route
	}
	// Check guarantees the default tier has a route, so an unknown tier
	// never lands nowhere.
	return r.Routes[r.Default]
}

// Check reports a routing table the scheduler would refuse.
func (r Routing) Check() error {
	if _, ok := r.Routes[r.Default]; !ok {
		return fmt.Errorf("video: the default tier %q has no route", r.Default)
	}
	for tier, route := range r.Routes {
		// The task API's priority range: a route outside it would make every
		// generation of that tier fail validation.
		if route.Queue == "" || route.Priority < 1 || route.Priority > 10 {
			return fmt.Errorf("video: tier %s: a route needs a queue and a priority of 1 to 10", tier)
		}
	}
	return nil
}
