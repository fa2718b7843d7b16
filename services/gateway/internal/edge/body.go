package edge

import (
	"bytes"
	"io"
	"net/http"
)

// heldBody is a request body the gateway has read into memory. Each layer
// that looks at a JSON body (the edge's checks, the file forms, the Kueue
// specs) gets the bytes themselves from ReadBody instead of copying them
// once more.
type heldBody struct {
	*bytes.Reader
	b []byte
}

func (heldBody) Close() error { return nil }

// SetBody makes b r's body, and its length r's ContentLength.
func SetBody(r *http.Request, b []byte) {
	r.Body, r.ContentLength = heldBody{Reader: bytes.NewReader(b), b: b}, int64(len(b))
}

// HeldBytes returns what is left to read of the body and reads it: a
// decoder given the request's body takes the bytes the edge already holds
// instead of copying them (apijson.HeldBody). The caller must not change
// them.
func (h heldBody) HeldBytes() []byte {
	rest := h.b[len(h.b)-h.Len():]
	_, _ = h.Seek(0, io.SeekEnd)
	return rest
}

// ReadBody reads r's body to its end. A body set by SetBody and not read
// since is answered without a copy: the caller must not change the bytes
// in place, only set new ones with SetBody.
func ReadBody(r *http.Request) ([]byte, error) {
	if h, ok := r.Body.(heldBody); ok && h.Len() == len(h.b) {
		return h.HeldBytes(), nil
	}
	defer r.Body.Close()
	return io.ReadAll(r.Body)
}
