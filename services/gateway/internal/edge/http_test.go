package edge

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMiddleware(t *testing.T) {
	const limit = 64
	tests := []struct {
		name        string
		method      string
		target      string
		contentType string
		body        string
		chunked     bool
		wantStatus  int // 0: passed to next
		wantCode    any
		// wantType: the Content-Type next sees when passed ("": as sent)
		wantType string
	}{
		{name: "plain GET", method: "GET", target: "/api/v1/tasks/t-1?page_size=5"},
		{name: "good JSON", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"name":"été ☃ \ud83d\ude00"}`},
		{name: "JSON with charset", method: "POST", target: "/api/v1/tasks", contentType: "application/json; charset=utf-8", body: `{}`},
		{name: "a +json type", method: "PATCH", target: "/api/v1/admin/tenants/a", contentType: "application/merge-patch+json", body: `{}`},
		{name: "no Content-Type", method: "POST", target: "/api/v1/tasks", body: `{}`},
		{name: "an escaped backslash before u0000 is text", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"name":"a\\u0000"}`},
		{name: "malformed JSON is the decoder's", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"name":`},
		{name: "empty body, any type", method: "POST", target: "/api/v1/tasks/t/cancel", contentType: "text/plain"},
		{name: "curl -d's default type with JSON", method: "POST", target: "/api/v1/tasks", contentType: "application/x-www-form-urlencoded", body: `{"name":"t"}`, wantType: "application/json"},
		{name: "fetch's default type with JSON", method: "POST", target: "/api/v1/tasks", contentType: "text/plain;charset=UTF-8", body: `[1]`, wantType: "application/json"},
		{name: "curl -d's default type with malformed JSON is the decoder's", method: "POST", target: "/api/v1/tasks", contentType: "application/x-www-form-urlencoded", body: ` {"name":`, wantType: "application/json"},
		{name: "fetch's default type with a malformed array is the decoder's", method: "POST", target: "/api/v1/tasks", contentType: "text/plain", body: `[1,`, wantType: "application/json"},
		{name: "128-character id", method: "GET", target: "/api/v1/tasks/" + strings.Repeat("a", 128)},

		{name: "NUL escape", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"name":"a\u0000b"}`, wantStatus: 400, wantCode: 30005.0},
		{name: "NUL escape in a key", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"env":{"A\u0000":"b"}}`, wantStatus: 400, wantCode: 30005.0},
		{name: "raw NUL", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: "{\"name\":\"a\x00b\"}", wantStatus: 400, wantCode: 30005.0},
		{name: "invalid UTF-8", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: "{\"name\":\"\xff\xfe\"}", wantStatus: 400, wantCode: 30005.0},
		{name: "lone high surrogate", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"name":"\ud83d"}`, wantStatus: 400, wantCode: 30005.0},
		{name: "lone low surrogate", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"name":"\ude00x"}`, wantStatus: 400, wantCode: 30005.0},
		{name: "text/plain, not JSON", method: "POST", target: "/api/v1/tasks", contentType: "text/plain", body: `name=t`, wantStatus: 415, wantCode: 415.0},
		{name: "form, not JSON-shaped", method: "POST", target: "/api/v1/tasks", contentType: "application/x-www-form-urlencoded", body: `not json`, wantStatus: 415, wantCode: 415.0},
		{name: "XML", method: "POST", target: "/api/v1/tasks", contentType: "application/xml", body: `{}`, wantStatus: 415, wantCode: 415.0},
		{name: "multipart on a JSON route", method: "POST", target: "/api/v1/tasks", contentType: "multipart/form-data; boundary=x", body: `{}`, wantStatus: 415, wantCode: 415.0},
		{name: "unparsable type", method: "POST", target: "/api/v1/tasks", contentType: "json;;", body: `{}`, wantStatus: 415, wantCode: 415.0},
		{name: "form", method: "POST", target: "/api/v1/tasks", contentType: "application/x-www-form-urlencoded", body: `a=b`, wantStatus: 415, wantCode: 415.0},
		{name: "declared too large", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"name":"` + strings.Repeat("x", limit) + `"}`, wantStatus: 413, wantCode: 413.0},
		{name: "chunked too large", method: "POST", target: "/api/v1/tasks", contentType: "application/json", body: `{"name":"` + strings.Repeat("x", limit) + `"}`, chunked: true, wantStatus: 413, wantCode: 413.0},
		{name: "NUL in a path segment", method: "GET", target: "/api/v1/tasks/a%00b", wantStatus: 400, wantCode: 30005.0},
		{name: "invalid UTF-8 in a path segment", method: "GET", target: "/api/v1/tasks/%ff", wantStatus: 400, wantCode: 30005.0},
		{name: "129-character id", method: "GET", target: "/api/v1/tasks/" + strings.Repeat("é", 129), wantStatus: 400, wantCode: 30005.0},
		{name: "NUL in a query value", method: "GET", target: "/api/v1/tasks?page_token=%00", wantStatus: 400, wantCode: 30005.0},
		{name: "invalid UTF-8 in a query value", method: "GET", target: "/api/v1/tasks?page_token=%00%ff..%2f", wantStatus: 400, wantCode: 30005.0},
		{name: "invalid UTF-8 in a query name", method: "GET", target: "/api/v1/tasks?%ff=1", wantStatus: 400, wantCode: 30005.0},
		{name: "malformed query", method: "GET", target: "/api/v1/tasks?a=%zz", wantStatus: 400, wantCode: 30005.0},
		{name: "video: long id", method: "GET", target: "/v1/video/generations/" + strings.Repeat("a", 10000), wantStatus: 400, wantCode: "InvalidParameter"},
		{name: "video: NUL in the body", method: "POST", target: "/v1/video/generations", contentType: "application/json", body: `{"model":"a\u0000"}`, wantStatus: 400, wantCode: "InvalidParameter"},
		{name: "video: too large", method: "POST", target: "/v1/video/generations", contentType: "application/json", body: strings.Repeat(" ", limit+1), wantStatus: 413, wantCode: "InvalidParameter"},
		{name: "video: text/plain", method: "DELETE", target: "/api/v1/video/generations/x", contentType: "text/plain", body: "x", wantStatus: 415, wantCode: "InvalidParameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotBody, gotType string
			reached := false
			h := Middleware(Options{MaxBody: limit}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached = true
				b, _ := io.ReadAll(r.Body)
				gotBody, gotType = string(b), r.Header.Get("Content-Type")
			}))
			var rd io.Reader
			if tt.body != "" {
				rd = strings.NewReader(tt.body)
				if tt.chunked {
					rd = io.MultiReader(rd) // hides the length: sent chunked
				}
			}
			req := httptest.NewRequest(tt.method, tt.target, rd)
			if tt.chunked {
				req.ContentLength = -1
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if tt.wantStatus == 0 {
				if !reached || w.Code != 200 {
					t.Fatalf("refused: %d %s", w.Code, w.Body)
				}
				if gotBody != tt.body {
					t.Errorf("next read %q, want the whole body %q", gotBody, tt.body)
				}
				if want := cmp.Or(tt.wantType, tt.contentType); gotType != want {
					t.Errorf("next saw Content-Type %q, want %q", gotType, want)
				}
				return
			}
			if reached {
				t.Fatal("the request reached next")
			}
			var env map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || w.Code != tt.wantStatus || env["code"] != tt.wantCode {
				t.Fatalf("answer %d %s, want %d with code %v", w.Code, w.Body, tt.wantStatus, tt.wantCode)
			}
			if _, isVideo := tt.wantCode.(string); isVideo {
				if _, ok := env["request_id"]; !ok || len(env) != 3 {
					t.Errorf("video error body %s, want code, message, request_id", w.Body)
				}
			} else if d, ok := env["data"]; !ok || d != nil || len(env) != 3 {
				t.Errorf("error body %s, want code, message, data: null", w.Body)
			}
		})
	}
}

func TestRawBodiesAreOnlySized(t *testing.T) {
	var read string
	h := Middleware(Options{MaxBody: 4, RawMaxBody: 8, RawBody: func(r *http.Request) bool { return strings.HasSuffix(r.URL.Path, "/uploads") }},
		http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { b, _ := io.ReadAll(r.Body); read = string(b) }))
	req := httptest.NewRequest("POST", "/jobs/uploads", strings.NewReader("\x00\xff12"))
	req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
	w := httptest.NewRecorder()
	if h.ServeHTTP(w, req); w.Code != 200 || read != "\x00\xff12" {
		t.Errorf("a raw body: %d %s, the route read %q", w.Code, w.Body, read)
	}
	req = httptest.NewRequest("POST", "/jobs/uploads", strings.NewReader("123456789"))
	w = httptest.NewRecorder()
	if h.ServeHTTP(w, req); w.Code != 413 {
		t.Errorf("a raw body declared over the limit: %d %s", w.Code, w.Body)
	}
}

func TestBadJSONText(t *testing.T) {
	for in, bad := range map[string]bool{
		`"\u0000"`: true, `"\U0000"`: false, `"\\u0000"`: false, `"\\\u0000"`: true, `"\u00"`: false,
		`"\uD83D\uDE00"`: false, `"\uD83D\u0041"`: true, `"\uD83D"`: true, `"\uDE00"`: true, `"\u0001"`: false,
		"\"\xc3\xa9\"": false, "\"\xc3\"": true, `"\u`: false,
	} {
		if got := badJSONText([]byte(in)) != ""; got != bad {
			t.Errorf("badJSONText(%s) = %v, want %v", in, got, bad)
		}
	}
}
