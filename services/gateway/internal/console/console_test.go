package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerServesTheEmbeddedConsole(t *testing.T) {
	h := Handler()
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	for path, want := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		w := get(http.MethodGet, path)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), want) || w.Body.Len() == 0 ||
			!strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: %d %v", path, w.Code, w.Header())
		}
	}
	if w := get(http.MethodGet, "/ui/"); !strings.Contains(w.Body.String(), `<script type="module" src="app.js">`) {
		t.Errorf("index.html: %s", w.Body.String())
	}
	if w := get(http.MethodGet, "/ui"); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/ui/" {
		t.Errorf("/ui: %d %v", w.Code, w.Header())
	}
	for _, path := range []string{"/ui/nothing.js", "/ui/../console.go", "/ui/dist/app.js", "/ui/index.txt"} {
		if w := get(http.MethodGet, path); w.Code != http.StatusNotFound {
			t.Errorf("%s: %d", path, w.Code)
		}
	}
	if w := get(http.MethodPost, "/ui/"); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", w.Code)
	}
}
