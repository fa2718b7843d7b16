package scheduler

import (
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/adapters/frames"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/adapters/rewrite"
	videoapp "github.com/taskmesh/taskmesh/services/scheduler/internal/video/app"
	videodomain "github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
	videoports "github.com/taskmesh/taskmesh/services/scheduler/internal/video/ports"
)

// VideoModel is a model the video API offers (ID such as wan2.2-t2v,
// DisplayName such as Wan2.2-T2V-14B, its type, resolutions, durations and
// GPUs per generation).
type VideoModel = videodomain.Model

// VideoRoute is the queue and priority of a tier's generations.
type VideoRoute = videodomain.Route

// DefaultVideoModels are wan2.2-t2v and wan2.2-i2v.
func DefaultVideoModels() []VideoModel { return videodomain.DefaultModels() }

// DefaultVideoRoutes: premium → tenant-high-priority-queue at priority 2,
// standard → tenant-low-priority-queue at priority 5.
func DefaultVideoRoutes() map[string]VideoRoute { return videodomain.DefaultRoutes() }

// VideoConfig configures the video generation API (docs/api/video.md).
// Zero values take the defaults documented on each field.
type VideoConfig struct {
	// Models offered (default DefaultVideoModels).
	Models []VideoModel
	// Routes by tenant tier (default DefaultVideoRoutes); tiers without a
	// route use DefaultTier's (default "standard").
	Routes      map[string]VideoRoute
	DefaultTier string
	// Rewriter: an OpenAI-compatible chat-completions endpoint rewrites
	// prompts when RewriterBaseURL and RewriterModel are set; otherwise, or
	// when it fails, the rule-based rewriter does.
	RewriterBaseURL, RewriterModel, RewriterAPIKey string
	RewriterTimeout                                time.Duration // default 20s
	// ImageTimeout bounds the download of a first frame (default 15s).
	ImageTimeout time.Duration
	// AllowPrivateImageURLs lets first frames be downloaded from
	// non-public addresses (tests, development). Off by default: SSRF.
	AllowPrivateImageURLs bool
	// Location is the time zone of the answers' wall-clock times (default
	// UTC+8, as in the documented answers; docs/api/video.md#the-get-body).
	Location *time.Location
	// SweepInterval: how often expired generations are removed (default 1m).
	SweepInterval time.Duration
	// Seed draws the seed of requests without one (default random).
	Seed func() int
}

// String keeps the rewriter's API key out of logs.
func (c VideoConfig) String() string {
	return fmt.Sprintf("VideoConfig{Models:%d RewriterBaseURL:%s RewriterModel:%s RewriterAPIKey:[redacted]}",
		len(c.Models), c.RewriterBaseURL, c.RewriterModel)
}

// video is the composed video API.
type video struct {
	app    *videoapp.App
	server *videoports.Server
	sweep  time.Duration
}

func newVideo(cfg Config, tasks videoapp.Tasks, log *slog.Logger) (*video, error) {
	vc := *cfg.Video
	if vc.Models == nil {
		vc.Models = DefaultVideoModels()
	}
	if vc.Routes == nil {
		vc.Routes = DefaultVideoRoutes()
	}
	if vc.DefaultTier == "" {
		vc.DefaultTier = "standard"
	}
	if vc.SweepInterval <= 0 {
		vc.SweepInterval = time.Minute
	}
	catalog, err := videodomain.NewCatalog(vc.Models)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	routing := videodomain.Routing{Routes: vc.Routes, Default: vc.DefaultTier}
	if err := routing.Check(); err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	var rw videoapp.Rewriter = rewrite.Rules{}
	if vc.RewriterBaseURL != "" || vc.RewriterModel != "" {
		o, err := rewrite.NewOpenAI(rewrite.OpenAIConfig{BaseURL: vc.RewriterBaseURL, Model: vc.RewriterModel,
			APIKey: vc.RewriterAPIKey, Timeout: vc.RewriterTimeout})
		if err != nil {
			return nil, fmt.Errorf("scheduler: %w", err)
		}
		rw = rewrite.Fallback{Primary: o, Secondary: rewrite.Rules{}, Log: log}
	}
	a := videoapp.New(videoapp.Config{Tasks: tasks, Catalog: catalog, Routing: routing, Objects: cfg.Objects,
		Frames:   frames.NewLoader(frames.Options{Timeout: vc.ImageTimeout, AllowPrivate: vc.AllowPrivateImageURLs}),
		Rewriter: rw, Now: cfg.Now, Seed: vc.Seed, Log: log})
	return &video{app: a, sweep: vc.SweepInterval,
		server: &videoports.Server{App: a, Catalog: catalog, Location: vc.Location, Log: log}}, nil
}

func (v *video) register(g grpc.ServiceRegistrar) { videov1.RegisterVideoServiceServer(g, v.server) }
