package throttle

import (
	"context"

	gotel "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// rejections counts refused requests by tenant and by the limit that
// refused them (docs/operations.md): key_rpm, key_tpm, tenant_rpm,
// tenant_tpm, or too_large for a request costing more than a whole
// minute's tokens. Tenants are few and the operator's: the label stays
// bounded.
type rejections struct{ c metric.Int64Counter }

func newRejections() rejections {
	c, _ := gotel.Meter("github.com/taskmesh/taskmesh/services/gateway/internal/throttle").Int64Counter(
		"taskmesh.ratelimit.rejections",
		metric.WithDescription("requests refused over a rate limit, by tenant and limit"), metric.WithUnit("{request}"))
	return rejections{c: c}
}

func (r rejections) add(ctx context.Context, tenant, limit string) {
	r.c.Add(ctx, 1, metric.WithAttributes(attribute.String("tenant", tenant), attribute.String("limit", limit)))
}
