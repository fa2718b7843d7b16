package edge

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/taskmesh/taskmesh/services/gateway/internal/apijson"
)

func TestReadBodyAnswersAHeldBodyWithoutACopy(t *testing.T) {
	r := httptest.NewRequest("POST", "/api/v1/tasks", strings.NewReader(`{"name":"a"}`))
	first, err := ReadBody(r)
	if err != nil || string(first) != `{"name":"a"}` {
		t.Fatalf("first read: %q, %v", first, err)
	}
	SetBody(r, first)
	if r.ContentLength != int64(len(first)) {
		t.Fatalf("ContentLength %d, want %d", r.ContentLength, len(first))
	}
	again, err := ReadBody(r)
	if err != nil || &again[0] != &first[0] || len(again) != len(first) {
		t.Fatalf("a held body was copied or changed: %q, %v", again, err)
	}
	// Read to its end, as io.ReadAll leaves a body.
	if rest, _ := io.ReadAll(r.Body); len(rest) != 0 {
		t.Fatalf("the body still had %q after ReadBody", rest)
	}
}

func TestReadBodyReadsWhatIsLeftOfAHeldBodyPartlyRead(t *testing.T) {
	r := httptest.NewRequest("POST", "/", nil)
	SetBody(r, []byte(`{"name":"b"}`))
	head := make([]byte, 2)
	if _, err := io.ReadFull(r.Body, head); err != nil {
		t.Fatal(err)
	}
	rest, err := ReadBody(r)
	if err != nil || string(rest) != `name":"b"}` {
		t.Fatalf("rest: %q, %v", rest, err)
	}
}

// A decoder given a held body takes its bytes as they are: what is left of
// it, the same memory, and the body read to its end after.
func TestHeldBodyGivesADecoderItsBytes(t *testing.T) {
	var _ apijson.HeldBody = heldBody{}
	r := httptest.NewRequest("POST", "/", nil)
	b := []byte(`{"name":"c"}`)
	SetBody(r, b)
	head := make([]byte, 1)
	if _, err := io.ReadFull(r.Body, head); err != nil {
		t.Fatal(err)
	}
	rest := r.Body.(apijson.HeldBody).HeldBytes()
	if string(rest) != `"name":"c"}` || &rest[0] != &b[1] {
		t.Fatalf("HeldBytes: %q, not the held bytes after the one read", rest)
	}
	if more, _ := io.ReadAll(r.Body); len(more) != 0 {
		t.Fatalf("the body still had %q after HeldBytes", more)
	}
}
