package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/taskmesh/taskmesh/services/gateway/internal/httperr"
)

// MaxSegmentRunes caps every path segment: ids of tasks, attempts,
// tenants, quotas and video generations are at most 128 characters.
const MaxSegmentRunes = 128

// Options configure Middleware.
type Options struct {
	// MaxBody bounds request bodies in bytes (required).
	MaxBody int64
	// RawBody, if not nil, reports requests whose bodies are not JSON
	// (multipart uploads): they are streamed to the route, which bounds
	// them itself; the edge refuses only a declared size over RawMaxBody.
	RawBody func(*http.Request) bool
	// RawMaxBody bounds raw bodies (default MaxBody).
	RawMaxBody int64
}

// Middleware checks each request's path, query and body (see the package
// doc) and answers a refusal itself; next sees only requests that passed,
// with the body buffered.
func Middleware(o Options, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := checkURL(r.URL); p != nil {
			httperr.WriteFor(w, r, *p)
			return
		}
		if p := checkBody(o, r); p != nil {
			httperr.WriteFor(w, r, *p)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func invalid(format string, args ...any) *httperr.Problem {
	p := httperr.New(http.StatusBadRequest, httperr.CodeInvalidArgument, fmt.Sprintf(format, args...))
	return &p
}

// checkURL refuses NUL, invalid UTF-8 and over-long segments in the path,
// and NUL and invalid UTF-8 in query parameters.
func checkURL(u *url.URL) *httperr.Problem {
	for _, seg := range strings.Split(u.Path, "/") {
		if msg := badText(seg); msg != "" {
			return invalid("path segment %s", msg)
		}
		if n := utf8.RuneCountInString(seg); n > MaxSegmentRunes {
			return invalid("path segment of %d characters: ids are at most %d", n, MaxSegmentRunes)
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return invalid("malformed query string")
	}
	for k, vs := range q {
		if msg := badText(k); msg != "" {
			return invalid("query parameter name %s", msg)
		}
		for _, v := range vs {
			if msg := badText(v); msg != "" {
				return invalid("query parameter %q %s", k, msg)
			}
		}
	}
	return nil
}

// badText says what is wrong with s, or "".
func badText(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character"
	}
	return ""
}

// checkBody reads a JSON body (at most o.MaxBody bytes) and checks its
// size, its Content-Type and its strings; the request keeps the bytes
// read. A raw body is only checked for its declared size.
func checkBody(o Options, r *http.Request) *httperr.Problem {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	if o.RawBody != nil && o.RawBody(r) {
		limit := o.RawMaxBody
		if limit <= 0 {
			limit = o.MaxBody
		}
		if r.ContentLength > limit {
			return tooLarge(limit)
		}
		return nil
	}
	if r.ContentLength > o.MaxBody {
		return tooLarge(o.MaxBody)
	}
	ct := r.Header.Get("Content-Type")
	kind, p := classifyContentType(ct)
	if p != nil {
		return p
	}
	var body []byte
	var err error
	if _, held := r.Body.(heldBody); held {
		body, err = ReadBody(r)
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, o.MaxBody+1))
		r.Body.Close()
	}
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr), int64(len(body)) > o.MaxBody:
		return tooLarge(o.MaxBody)
	case err != nil:
		// The client went away or sent a broken chunked body.
		return invalid("request body could not be read")
	}
	SetBody(r, body)
	if len(body) == 0 {
		return nil
	}
	if kind == defaultType {
		if !json.Valid(body) && !looksLikeJSON(body) {
			return notJSON(ct)
		}
		// What follows decodes by the Content-Type; the body is JSON, or
		// meant to be, and a malformed one gets the route's own answer for
		// malformed JSON (400), as it would under application/json.
		r.Header.Set("Content-Type", "application/json")
	}
	if msg := badJSONText(body); msg != "" {
		return invalid("request body: %s", msg)
	}
	return nil
}

func tooLarge(limit int64) *httperr.Problem {
	p := httperr.New(http.StatusRequestEntityTooLarge, httperr.CodeTooLarge,
		fmt.Sprintf("request body too large: at most %d bytes", limit))
	return &p
}

// bodyType is what a request's Content-Type says of its body.
type bodyType int

const (
	// jsonType: application/json, any application/*+json, or no
	// Content-Type at all, which clients that send JSON without naming it
	// do.
	jsonType bodyType = iota
	// defaultType: a type clients put on a body they did not label
	// (curl -d sends application/x-www-form-urlencoded, fetch with a
	// string body text/plain). The body is taken as JSON if it is JSON
	// or opens as JSON does, else refused as not JSON. No credential rides on such a request by
	// itself (every route authenticates by a header a page cannot set
	// without a CORS preflight), so accepting these types opens no
	// cross-site path.
	defaultType
)

// classifyContentType sorts a request's Content-Type; any type that names
// another format (XML, multipart, octet-stream, …) is 415.
func classifyContentType(ct string) (bodyType, *httperr.Problem) {
	if ct == "" {
		return jsonType, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
	case mt == "application/json", strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return jsonType, nil
	case mt == "application/x-www-form-urlencoded", mt == "text/plain":
		return defaultType, nil
	}
	return jsonType, notJSON(ct)
}

func notJSON(ct string) *httperr.Problem {
	p := httperr.New(http.StatusUnsupportedMediaType, httperr.CodeUnsupportedMediaType,
		fmt.Sprintf("Content-Type %q is not JSON: send application/json", ct))
	return &p
}

// looksLikeJSON reports whether a body opens as a JSON object or array
// does: a client sending curl -d '{"name":' meant JSON and is told what
// is wrong with it, while a form (name=t&command=true) is not JSON at all.
func looksLikeJSON(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// badJSONText finds invalid UTF-8 and NUL in a JSON text without decoding
// it: NUL can only be a raw 0x00 byte (itself invalid JSON) or the escape
// \u0000, and an escaped UTF-16 surrogate must come in a pair. Backslashes
// occur only inside strings in valid JSON, so a linear scan of escapes is
// exact; invalid JSON is left to the route's decoder.
func badJSONText(b []byte) string {
	if !utf8.Valid(b) {
		return "not valid UTF-8"
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return "a string contains a NUL character"
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		i++
		if i >= len(b) || b[i] != 'u' {
			continue // \" \\ \/ \b … (or a truncated text: the decoder says so)
		}
		r, ok := hex4(b[i+1:])
		if !ok {
			continue
		}
		i += 4
		switch {
		case r == 0:
			return "a string contains a NUL character (\\u0000)"
		case r >= 0xDC00 && r <= 0xDFFF:
			return "a string contains an unpaired UTF-16 surrogate"
		case r >= 0xD800 && r <= 0xDBFF:
			if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
				if lo, ok := hex4(b[i+3:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					i += 6
					continue
				}
			}
			return "a string contains an unpaired UTF-16 surrogate"
		}
	}
	return ""
}

// hex4 decodes four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
