package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/taskmesh/taskmesh/platform/metrics"
)

var runs atomic.Int64

// Instruments of the global provider come out under Prometheus names: the
// unit appended, counters with _total, histograms in seconds with the
// shared buckets, no scope labels; Serve answers /metrics only.
func TestSetupExportsInstrumentsUnderPrometheusNames(t *testing.T) {
	// The provider is the process's: each run of the test (-count) writes
	// series of its own.
	kind := fmt.Sprintf("run%d", runs.Add(1))
	exp, err := metrics.Setup("test")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := metrics.Setup("other"); err != nil || again != exp {
		t.Fatalf("a second Setup = %p, %v; want the first exporter %p", again, err, exp)
	}
	m := metrics.Meter("github.com/taskmesh/taskmesh/platform/metrics_test")
	c, _ := m.Int64Counter("taskmesh.test.things", metric.WithUnit("{thing}"))
	c.Add(context.Background(), 3, metric.WithAttributes(attribute.String("kind", kind)))
	h, _ := m.Float64Histogram("taskmesh.test.wait", metric.WithUnit("s"))
	h.Record(context.Background(), 0.2, metric.WithAttributes(attribute.String("kind", kind)))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- metrics.ServeListener(ctx, lis, exp.Handler(), nil) }()
	base := "http://" + lis.Addr().String()
	body := get(t, base+metrics.Path, http.StatusOK)
	for _, want := range []string{
		`taskmesh_test_things_total{kind="` + kind + `"} 3`,
		`taskmesh_test_wait_seconds_bucket{kind="` + kind + `",le="0.25"} 1`,
		`taskmesh_test_wait_seconds_bucket{kind="` + kind + `",le="0.1"} 0`,
		`taskmesh_test_wait_seconds_count{kind="` + kind + `"} 1`,
		"go_goroutines",
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(body, "otel_scope_name") {
		t.Error("scrape has otel_scope_name labels")
	}
	get(t, base+"/other", http.StatusNotFound)
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("ServeListener after cancel = %v", err)
	}
}

// A taken address is an error at once, not a silent missing endpoint.
func TestServeReportsListenErrors(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if err := metrics.Serve(context.Background(), lis.Addr().String(), http.NotFoundHandler(), nil); err == nil ||
		!strings.Contains(err.Error(), "listen") {
		t.Fatalf("Serve on a taken address = %v", err)
	}
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET %s = %d, want %d: %s", url, resp.StatusCode, want, b)
	}
	return string(b)
}
