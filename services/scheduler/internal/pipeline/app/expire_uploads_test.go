package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gotel "go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/objectstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// flakyDeletes fails the object store's deletions while fail is set (the
// sweeps run on the test's goroutine).
type flakyDeletes struct {
	objectstore.Store
	fail bool
}

func (f *flakyDeletes) Delete(ctx context.Context, key string) error {
	if f.fail {
		return errors.New("store unreachable")
	}
	return f.Store.Delete(ctx, key)
}

func (h *harness) exists(key string) bool {
	h.t.Helper()
	_, err := h.objects.Stat(h.ctx, key)
	if err != nil && !errors.Is(err, objectstore.ErrNotFound) {
		h.t.Fatal(err)
	}
	return err == nil
}

// Uploads no job used within the TTL are deleted and their keys refused
// with the reason; uploads a job used are kept; a deletion that failed is
// done by a later sweep.
func TestUploadsNoJobUsedExpire(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	gotel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	t0 := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	clk := clocktest.NewFixed(t0)
	var flaky *flakyDeletes
	h := newHarness(t, func(c *app.Config) {
		c.Now = clk.Now
		c.UploadTTL = 24 * time.Hour
		flaky = &flakyDeletes{Store: c.Objects}
		c.Objects = flaky
	})
	acme := user("acme")
	model := h.upload(acme, "model", "m.onnx", onnxModel)
	quant := h.upload(acme, "quant", "q.zip", quantZip)
	unused := h.upload(acme, "model", "unused.onnx", onnxModel)
	clk.Set(t0.Add(time.Hour))
	if _, err := h.app.CreateJob(h.ctx, acme, domain.JobRequest{ModelKey: model.Key, QuantKey: quant.Key}); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(23 * time.Hour))
	recent := h.upload(acme, "ref_image", "cat.png", pngImage)

	// Not yet 24 hours: nothing goes.
	if n, err := h.app.SweepUploads(h.ctx); err != nil || n != 0 {
		t.Fatalf("sweep before the TTL = %d, %v", n, err)
	}
	clk.Set(t0.Add(24*time.Hour + time.Second))
	// The store cannot delete: the upload is expired (refused) all the
	// same, and its object is deleted by the next sweep.
	flaky.fail = true
	if n, err := h.app.SweepUploads(h.ctx); err != nil || n != 0 || !h.exists(unused.Key) {
		t.Fatalf("sweep with failing deletions = %d, %v", n, err)
	}
	_, err := h.app.CreateJob(h.ctx, acme, domain.JobRequest{ModelKey: unused.Key, QuantKey: quant.Key})
	var ie *domain.InvalidError
	if !errors.As(err, &ie) || ie.Field != "model_key" || !strings.Contains(ie.Reason, "expired: no job used it within 24h of its upload") ||
		!strings.Contains(ie.Reason, "upload the file again") {
		t.Fatalf("an expired key: %v", err)
	}
	flaky.fail = false
	if n, err := h.app.SweepUploads(h.ctx); err != nil || n != 1 {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	if h.exists(unused.Key) || !h.exists(model.Key) || !h.exists(quant.Key) || !h.exists(recent.Key) {
		t.Errorf("after the sweep: unused %v model %v quant %v recent %v", h.exists(unused.Key), h.exists(model.Key),
			h.exists(quant.Key), h.exists(recent.Key))
	}
	if n, _ := h.app.SweepUploads(h.ctx); n != 0 {
		t.Errorf("a second sweep deleted %d", n)
	}

	// Long after: the recent upload expires too; the used ones stay and
	// still make jobs.
	clk.Set(t0.Add(100 * time.Hour))
	if n, err := h.app.SweepUploads(h.ctx); err != nil || n != 1 || h.exists(recent.Key) {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	_, err = h.app.CreateJob(h.ctx, acme, domain.JobRequest{ModelKey: model.Key, QuantKey: quant.Key, RefImageKeys: []string{recent.Key}})
	if !isInvalid(err, "ref_image_keys[0]") {
		t.Errorf("an expired ref image: %v", err)
	}
	if _, err := h.app.CreateJob(h.ctx, acme, domain.JobRequest{ModelKey: model.Key, QuantKey: quant.Key}); err != nil {
		t.Errorf("a job from used uploads after 100 hours: %v", err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(h.ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range d.DataPoints {
					kind, _ := p.Attributes.Value("kind")
					if got[m.Name] == nil {
						got[m.Name] = map[string]int64{}
					}
					got[m.Name][kind.AsString()] += p.Value
				}
			}
		}
	}
	want := map[string]map[string]int64{
		"taskmesh.pipeline.uploads_expired": {"model": 1, "quant": 0, "ref_image": 1},
	}
	for name, kinds := range want {
		for kind, n := range kinds {
			if got[name][kind] != n {
				t.Errorf("%s{kind=%s} = %d, want %d", name, kind, got[name][kind], n)
			}
		}
	}
}

// An upload that expires between CreateJob's checks and its copies is
// refused by the mark, with the field that named it.
func TestCreateJobRefusesAnUploadExpiredMeanwhile(t *testing.T) {
	h := newHarness(t)
	acme := user("acme")
	model := h.upload(acme, "model", "m.onnx", onnxModel)
	quant := h.upload(acme, "quant", "q.zip", quantZip)
	racing := &expiringUse{jobStore: h.store, expire: quant.Key}
	h.cfg.Uploads = racing
	a := app.New(h.cfg)
	if _, err := a.CreateJob(h.ctx, acme, domain.JobRequest{ModelKey: model.Key, QuantKey: quant.Key}); !isInvalid(err, "quant_key") {
		t.Fatalf("err = %v, want an invalid quant_key", err)
	}
	if n := h.store.count(); n != 0 {
		t.Errorf("%d jobs created", n)
	}
}

// expiringUse expires one upload just before marking uploads used, as a
// sweeper running at that moment would.
type expiringUse struct {
	*jobStore
	expire string
}

func (e *expiringUse) UseUploads(ctx context.Context, tenant string, keys []string, at time.Time) error {
	e.mu.Lock()
	u := e.uploads[e.expire]
	u.ExpiredAt = at
	e.uploads[e.expire] = u
	e.mu.Unlock()
	return e.jobStore.UseUploads(ctx, tenant, keys, at)
}
