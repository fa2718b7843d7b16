// Package console serves the Taskmesh web console at /ui: static files
// built from web/ (TypeScript compiled by a pinned esbuild, `make
// console`) and embedded in the binary, so it works offline and needs no
// CDN. The console signs in with a tenant's API key, which it keeps in the
// browser tab's session storage and sends as a bearer token; the files
// themselves need no credential (docs/console.md).
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed dist
var files embed.FS

// Prefix is where the console is served.
const Prefix = "/ui/"

// contentTypes of the console's files.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// securityPolicy lets the console load only its own files and talk only
// to its own origin; videos and downloads come from signed links, which
// may be another host (an S3 bucket).
const securityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"media-src 'self' http: https:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Handler serves GET /ui/ (the page) and its files; /ui redirects to
// /ui/.
func Handler() http.Handler {
	dist, err := fs.Sub(files, "dist")
	if err != nil {
		panic(err) // embedded at build time
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/ui" {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		body, err := fs.ReadFile(dist, name)
		ct, known := contentTypes[path.Ext(name)]
		if err != nil || !known || strings.Contains(name, "/") {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		h := w.Header()
		h.Set("Content-Type", ct)
		h.Set("Content-Security-Policy", securityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary: always revalidate.
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	})
}
