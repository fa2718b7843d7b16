package gateway

import (
	"time"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/services/gateway/internal/live"
)

// LiveConfig configures the live task streams (GET
// /api/v1/tasks/{task_id}/events and /ws), fed by the task event topic.
// Zero values take the defaults of package live.
type LiveConfig struct {
	// Kafka is where the task event topic lives. Without brokers the
	// stream routes answer 503 and clients poll.
	Kafka kafka.Config
	// Topic is the task event topic (taskmesh.task.events.v1).
	Topic string
	// JobTopic is the job event topic (taskmesh.pipeline.events.v1) that
	// feeds GET /jobs/{job_id}/events.
	JobTopic string
	// MaxStreamsPerTenant bounds a tenant's open streams on one gateway
	// (100); one more is answered 429.
	MaxStreamsPerTenant int
	// Buffer is how many events a stream may fall behind before it is
	// closed as a slow consumer (256).
	Buffer int
	// KeepAlive is the interval of SSE comments and WebSocket pings (15s).
	KeepAlive time.Duration
	// IdleTimeout closes a stream that sent nothing for that long (10m).
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to a client (10s).
	WriteTimeout time.Duration
}

// LiveStats are the live streams' counters (see Gateway.LiveStats).
type LiveStats = live.Stats

// LiveStats returns the live streams' counters.
func (g *Gateway) LiveStats() LiveStats { return g.live.Stats() }

// LiveReady reports whether the task topic is being tailed: events
// published from now on reach the streams.
func (g *Gateway) LiveReady() bool { return g.live.Live() }
