package taskproto

import (
	"reflect"
	"testing"

	"github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func TestVideoParamsRoundTripEveryField(t *testing.T) {
	v := &domain.Video{Model: "wan2.2-i2v", Type: "image_to_video", Prompt: "a cat", NegativePrompt: "blur", PromptExtend: true,
		ActualPrompt: "a fluffy cat", ImageURL: "https://example.com/a.png", ImageObjectKey: "frames/a.png", Resolution: "720P",
		Width: 1280, Height: 720, Duration: 5, FrameNum: 81, Seed: 42, Watermark: true}
	// Every field of the domain value is set, so every field of the
	// message must be: a field added to one side only fails here.
	for i, f := 0, reflect.ValueOf(*v); i < f.NumField(); i++ {
		if f.Field(i).IsZero() {
			t.Fatalf("the test leaves domain.Video.%s unset", f.Type().Field(i).Name)
		}
	}
	p := VideoToProto(v)
	fields := p.ProtoReflect().Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); !p.ProtoReflect().Has(fd) {
			t.Errorf("VideoParams.%s is not mapped", fd.Name())
		}
	}
	if n := reflect.TypeOf(*v).NumField(); n != fields.Len() {
		t.Errorf("domain.Video has %d fields, VideoParams %d", n, fields.Len())
	}
	if back := VideoFromProto(p); !reflect.DeepEqual(back, v) {
		t.Errorf("round trip = %+v, want %+v", back, v)
	}
	if VideoToProto(nil) != nil || VideoFromProto(nil) != nil {
		t.Error("nil is not kept nil")
	}
}
