package objectstore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmesh/taskmesh/platform/clocktest"
	"github.com/taskmesh/taskmesh/platform/objectstore"
)

func put(t *testing.T, s objectstore.Store, key string) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, strings.NewReader("x"), 1, ""); err != nil {
		t.Fatal(err)
	}
}

func listed(t *testing.T, l objectstore.Lister, prefix string) []string {
	t.Helper()
	var keys []string
	if err := l.List(context.Background(), prefix, func(i objectstore.Info) error {
		keys = append(keys, i.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// The sweep for stores without lifecycle rules: objects under the prefix
// older than the cutoff go, younger ones and other prefixes stay.
func TestExpireOldWithAnInjectedClock(t *testing.T) {
	clk := clocktest.NewFixed(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fs, _ := newTestFS(t, func(c *objectstore.FSConfig) { c.Now = clk.Now })
	put(t, fs, "results/t1/a/old.json")
	put(t, fs, "videos/old.mp4")
	clk.Advance(20 * 24 * time.Hour)
	put(t, fs, "results/t2/b/young.json")
	put(t, fs, "results-other/x.json")
	if got := listed(t, fs, "results/"); !slices.Equal(got, []string{"results/t1/a/old.json", "results/t2/b/young.json"}) {
		t.Fatalf("List(results/) = %v", got)
	}
	if got := listed(t, fs, "results/t1"); !slices.Equal(got, []string{"results/t1/a/old.json"}) {
		t.Fatalf("List(results/t1) = %v", got)
	}
	clk.Advance(15 * 24 * time.Hour) // old is 35 days old, young 15
	n, err := objectstore.ExpireOld(context.Background(), fs, fs, "results/", clk.Now().Add(-30*24*time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("ExpireOld = %d, %v; want 1", n, err)
	}
	if got := listed(t, fs, ""); !slices.Equal(got, []string{"results-other/x.json", "results/t2/b/young.json", "videos/old.mp4"}) {
		t.Errorf("left = %v", got)
	}
}

func TestS3ListsObjects(t *testing.T) {
	s := newFakeS3(t).newStore(t, "pre/")
	put(t, s, "results/a.json")
	put(t, s, "results/b/c.json")
	put(t, s, "other.json")
	if got := listed(t, s, "results/"); !slices.Equal(got, []string{"results/a.json", "results/b/c.json"}) {
		t.Errorf("List = %v", got)
	}
	n, err := objectstore.ExpireOld(context.Background(), s, s, "results/", time.Now().Add(time.Hour))
	if err != nil || n != 2 || len(listed(t, s, "")) != 1 {
		t.Errorf("ExpireOld = %d, %v; left %v", n, err, listed(t, s, ""))
	}
}

// SetExpiry writes one lifecycle rule for the prefix, keeping the
// bucket's other rules; a real S3 then expires the objects itself.
func TestS3SetExpiryWritesALifecycleRule(t *testing.T) {
	var mu sync.Mutex
	stored := `<LifecycleConfiguration><Rule><ID>keep-logs</ID><Status>Enabled</Status><Filter><Prefix>logs/</Prefix></Filter><Expiration><Days>3</Days></Expiration></Rule></LifecycleConfiguration>`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_, lc := r.URL.Query()["lifecycle"]
		switch {
		case r.Method == http.MethodHead:
			w.WriteHeader(http.StatusOK)
		case lc && r.Method == http.MethodGet:
			_, _ = io.WriteString(w, stored)
		case lc && r.Method == http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			stored = string(b)
		default:
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	s, err := objectstore.NewS3(context.Background(), objectstore.S3Config{Endpoint: strings.TrimPrefix(srv.URL, "http://"),
		Bucket: "results", Region: "us-east-1", AccessKey: "a", SecretKey: "b", Prefix: "tm/"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // setting it again replaces it
		if err := s.SetExpiry(context.Background(), "results/", 30*24*time.Hour-time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetExpiry(context.Background(), "results/", 0); err == nil {
		t.Error("an expiry of zero was accepted")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"<ID>keep-logs</ID>", "<ID>taskmesh-expire-results</ID>", "<Prefix>tm/results/</Prefix>", "<Days>30</Days>"} {
		if !strings.Contains(stored, want) {
			t.Errorf("lifecycle configuration misses %s:\n%s", want, stored)
		}
	}
	if strings.Count(stored, "taskmesh-expire-results") != 1 {
		t.Errorf("the rule appears more than once:\n%s", stored)
	}
}
