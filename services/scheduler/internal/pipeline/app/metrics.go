package app

import (
	"context"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// metrics of the pipeline (docs/operations.md), labelled by upload kind
// only, a bounded set.
type metrics struct {
	uploadsExpired metric.Int64Counter
}

func newMetrics() *metrics {
	meter := gotel.Meter("github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app")
	// Instrument errors concern invalid names only; these are constant.
	m := &metrics{}
	m.uploadsExpired, _ = meter.Int64Counter("taskmesh.pipeline.uploads_expired",
		metric.WithDescription("uploads no job used within the upload TTL, deleted from the object store"), metric.WithUnit("{upload}"))
	for _, k := range []domain.Kind{domain.KindModel, domain.KindQuant, domain.KindRefImage} {
		m.uploadsExpired.Add(context.Background(), 0, metric.WithAttributes(attribute.String("kind", string(k))))
	}
	return m
}

func (m *metrics) uploadExpired(ctx context.Context, u Upload) {
	m.uploadsExpired.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", string(u.Kind))))
}
