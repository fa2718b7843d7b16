package edge

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
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
