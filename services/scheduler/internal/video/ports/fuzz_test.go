package ports

import (
	"testing"
	"unicode/utf8"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/protojson"

	videov1 "github.com/taskmesh/taskmesh/gen/taskmesh/video/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/video/domain"
)

// FuzzVideoRequest feeds video generation bodies (the video API's JSON
// names) through protojson, the protos' rules, the mapping and the
// catalog's normalisation. Nothing panics; an accepted request keeps the
// documented limits.
func FuzzVideoRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"wan2.2-t2v","input":{"prompt":"a cat on a windowsill"},"parameters":{"resolution":"720P","duration":5,"seed":42,"prompt_extend":true,"watermark":true}}`,
		`{"model":"wan2.2-i2v","input":{"prompt":"zoom","img_url":"https://example.com/a.png"}}`,
		`{"model":"wan2.2-i2v","input":{"prompt":"x","image":"data:image/png;base64,iVBORw0KGgo=","img_url":"https://other"}}`,
		`{"model":"wan2.2-t2v","input":{"prompt":""}}`, `{"model":"nope"}`, `{"parameters":{"duration":6}}`,
		`{"model":"wan2.2-t2v","input":{"prompt":"x","negative_prompt":"y"},"parameters":{"seed":2147483648}}`, `{`,
	} {
		f.Add([]byte(s))
	}
	v, err := protovalidate.New()
	if err != nil {
		f.Fatal(err)
	}
	catalog, err := domain.NewCatalog(domain.DefaultModels())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r videov1.CreateVideoGenerationRequest
		if (protojson.UnmarshalOptions{}).Unmarshal(body, &r) != nil || v.Validate(&r) != nil {
			return
		}
		req, err := request(&r)
		if err != nil {
			return
		}
		plan, err := catalog.Normalize(req, func() int { return 7 })
		if err != nil {
			return
		}
		if n := utf8.RuneCountInString(plan.Prompt); n == 0 || n > 800 || utf8.RuneCountInString(plan.NegativePrompt) > 500 ||
			plan.Duration != 5 || plan.Seed < 0 || plan.Seed > 2147483647 {
			t.Fatalf("accepted request breaks the documented limits: %+v", plan)
		}
	})
}
