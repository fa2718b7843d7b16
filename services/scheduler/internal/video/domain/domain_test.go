package domain

import (
	"errors"
	"strings"
	"testing"
	"time"

	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
)

func catalog(t *testing.T) Catalog {
	t.Helper()
	c, err := NewCatalog(DefaultModels())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }

func TestNormalize(t *testing.T) {
	c := catalog(t)
	long := strings.Repeat("猫", 801)
	t2v := func(mod func(*Request)) Request {
		r := Request{Model: "wan2.2-t2v", Prompt: "a cat"}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	i2v := func(mod func(*Request)) Request {
		r := Request{Model: "wan2.2-i2v", Type: ImageToVideo, Prompt: "a cat", Image: "https://example.com/cat.png"}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	tests := map[string]struct {
		in        Request
		wantField string // "" = valid
		check     func(t *testing.T, p Plan)
	}{
		"defaults": {in: t2v(nil), check: func(t *testing.T, p Plan) {
			if p.Type != TextToVideo || p.Resolution != "480P" || p.Duration != 5 || p.Seed != 42 || !p.PromptExtend || p.Watermark || p.Frames() != 81 {
				t.Errorf("plan = %+v", p)
			}
		}},
		"explicit values": {in: t2v(func(r *Request) {
			r.Resolution, r.Duration, r.Seed, r.PromptExtend, r.Watermark = "1080p", ptr(5), ptr(int64(MaxSeed)), ptr(false), ptr(true)
		}), check: func(t *testing.T, p Plan) {
			if p.Resolution != "1080P" || p.Seed != MaxSeed || p.PromptExtend || !p.Watermark {
				t.Errorf("plan = %+v", p)
			}
		}},
		"seed 0 is kept": {in: t2v(func(r *Request) { r.Seed = ptr(int64(0)) }), check: func(t *testing.T, p Plan) {
			if p.Seed != 0 {
				t.Errorf("seed = %d", p.Seed)
			}
		}},
		"prompt cut to 800 runes": {in: t2v(func(r *Request) { r.Prompt = long; r.NegativePrompt = strings.Repeat("a", 501) }),
			check: func(t *testing.T, p Plan) {
				if n := len([]rune(p.Prompt)); n != 800 || !strings.HasPrefix(long, p.Prompt) {
					t.Errorf("prompt has %d runes", n)
				}
				if len(p.NegativePrompt) != 500 {
					t.Errorf("negative prompt has %d characters", len(p.NegativePrompt))
				}
			}},
		"i2v with image": {in: i2v(nil)},
		"display name": {in: t2v(func(r *Request) { r.Model = "Wan2.2-T2V-14B" }), check: func(t *testing.T, p Plan) {
			if p.Model.ID != "wan2.2-t2v" || p.Type != TextToVideo {
				t.Errorf("plan = %+v", p)
			}
		}},
		"id in another case": {in: i2v(func(r *Request) { r.Model = "WAN2.2-I2V" }), check: func(t *testing.T, p Plan) {
			if p.Model.ID != "wan2.2-i2v" {
				t.Errorf("model = %s", p.Model.ID)
			}
		}},
		"family with type": {in: i2v(func(r *Request) { r.Model = "wan2.2" }), check: func(t *testing.T, p Plan) {
			if p.Model.ID != "wan2.2-i2v" || p.Type != ImageToVideo {
				t.Errorf("plan = %+v", p)
			}
		}},
		"family, type from the image": {in: i2v(func(r *Request) { r.Model, r.Type = "wan2.2", "" }), check: func(t *testing.T, p Plan) {
			if p.Model.ID != "wan2.2-i2v" || p.Type != ImageToVideo {
				t.Errorf("plan = %+v", p)
			}
		}},
		"family without image": {in: t2v(func(r *Request) { r.Model = "Wan2.2" }), check: func(t *testing.T, p Plan) {
			if p.Model.ID != "wan2.2-t2v" || p.Type != TextToVideo {
				t.Errorf("plan = %+v", p)
			}
		}},
		"family, unknown type": {in: t2v(func(r *Request) { r.Model, r.Type = "wan2.2", "text_to_image" }), wantField: "type"},
		"missing model":        {in: t2v(func(r *Request) { r.Model = "" }), wantField: "model"},
		"unknown model":        {in: t2v(func(r *Request) { r.Model = "wan9" }), wantField: "model"},
		"unknown type":         {in: t2v(func(r *Request) { r.Type = "text_to_image" }), wantField: "type"},
		"type not the model's": {in: t2v(func(r *Request) { r.Type = ImageToVideo }), wantField: "type"},
		"missing prompt":       {in: t2v(func(r *Request) { r.Prompt = "  " }), wantField: "input.prompt"},
		"image for text_to_video": {in: t2v(func(r *Request) { r.Image = "https://example.com/a.png" }), check: func(t *testing.T, p Plan) {
			if p.Type != TextToVideo || p.Image != "https://example.com/a.png" {
				t.Errorf("plan = %+v, want a text_to_video with its image to check", p)
			}
		}},
		"blank image for text_to_video": {in: t2v(func(r *Request) { r.Image = "  " }), check: func(t *testing.T, p Plan) {
			if p.Image != "" {
				t.Errorf("image = %q, want none", p.Image)
			}
		}},
		"no image for i2v":      {in: i2v(func(r *Request) { r.Image = "" }), wantField: "input.image"},
		"unknown resolution":    {in: t2v(func(r *Request) { r.Resolution = "4K" }), wantField: "parameters.resolution"},
		"duration other than 5": {in: t2v(func(r *Request) { r.Duration = ptr(10) }), wantField: "parameters.duration"},
		"duration 0":            {in: t2v(func(r *Request) { r.Duration = ptr(0) }), wantField: "parameters.duration"},
		"one video":             {in: t2v(func(r *Request) { r.VideoCount = ptr(1) })},
		"two videos":            {in: t2v(func(r *Request) { r.VideoCount = ptr(2) }), wantField: "parameters.video_count"},
		"negative seed":         {in: t2v(func(r *Request) { r.Seed = ptr(int64(-1)) }), wantField: "parameters.seed"},
		"seed above 2147483647": {in: t2v(func(r *Request) { r.Seed = ptr(int64(MaxSeed) + 1) }), wantField: "parameters.seed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := c.Normalize(tc.in, func() int { return 42 })
			if tc.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.check != nil {
					tc.check(t, p)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Field != tc.wantField {
				t.Fatalf("err = %v, want an invalid %s", err, tc.wantField)
			}
		})
	}
}

func TestTruncateCountsRunes(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"一只猫在草地上奔跑", 3, "一只猫"},
		{"ab猫cd", 3, "ab猫"},
		{"short", 800, "short"},
		{"", 5, ""},
	}
	for _, tc := range tests {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestCheckImage(t *testing.T) {
	ok := ImageInfo{Format: FormatPNG, Width: 800, Height: 600, Bytes: 1000}
	tests := map[string]struct {
		mod   func(*ImageInfo)
		valid bool
	}{
		"png":           {func(*ImageInfo) {}, true},
		"jpeg":          {func(i *ImageInfo) { i.Format = FormatJPEG }, true},
		"bmp":           {func(i *ImageInfo) { i.Format = FormatBMP }, true},
		"webp":          {func(i *ImageInfo) { i.Format = FormatWEBP; i.HasAlpha = true }, true},
		"bounds":        {func(i *ImageInfo) { i.Width, i.Height = 360, 2000 }, true},
		"gif":           {func(i *ImageInfo) { i.Format = "gif" }, false},
		"png alpha":     {func(i *ImageInfo) { i.HasAlpha = true }, false},
		"359 wide":      {func(i *ImageInfo) { i.Width = 359 }, false},
		"2001 high":     {func(i *ImageInfo) { i.Height = 2001 }, false},
		"over 10 MB":    {func(i *ImageInfo) { i.Bytes = MaxImageBytes + 1 }, false},
		"exactly 10 MB": {func(i *ImageInfo) { i.Bytes = MaxImageBytes }, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			i := ok
			tc.mod(&i)
			err := CheckImage(i)
			var inv *InvalidError
			if tc.valid != (err == nil) || (err != nil && (!errors.As(err, &inv) || inv.Field != "input.image")) {
				t.Fatalf("CheckImage(%+v) = %v, want valid %v", i, err, tc.valid)
			}
		})
	}
}

func TestOutputSize(t *testing.T) {
	tests := []struct {
		res, typ   string
		iw, ih     int
		wantW, wan int
	}{
		{"480P", TextToVideo, 0, 0, 832, 480},
		{"720P", TextToVideo, 0, 0, 1280, 720},
		{"1080P", TextToVideo, 0, 0, 1920, 1080},
		{"720P", ImageToVideo, 1000, 1000, 960, 960},
		{"480P", ImageToVideo, 600, 800, 544, 736},
		{"720P", ImageToVideo, 1600, 900, 1280, 720},
	}
	for _, tc := range tests {
		w, h := OutputSize(tc.res, tc.typ, tc.iw, tc.ih)
		if w != tc.wantW || h != tc.wan {
			t.Errorf("OutputSize(%s, %s, %dx%d) = %dx%d, want %dx%d", tc.res, tc.typ, tc.iw, tc.ih, w, h, tc.wantW, tc.wan)
		}
	}
}

func TestStatusAndDeleteTable(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(time.Hour)
	tests := []struct {
		status  task.Status
		deleted bool
		at      time.Time
		want    string
		action  Deletion
		err     error
	}{
		{task.StatusPending, false, now, StatusQueued, DeleteCancel, nil},
		{task.StatusAssigned, false, now, StatusQueued, DeleteCancel, nil},
		{task.StatusPreempted, false, now, StatusQueued, DeleteCancel, nil},
		{task.StatusSuspended, false, now, StatusQueued, DeleteCancel, nil},
		{task.StatusRunning, false, now, StatusRunning, DeleteNothing, ErrTaskRunning},
		{task.StatusCompleted, false, now, StatusSucceeded, DeleteRemove, nil},
		{task.StatusFailed, false, now, StatusFailed, DeleteRemove, nil},
		{task.StatusCancelled, false, now, StatusCanceled, DeleteNothing, ErrTaskCanceled},
		{task.StatusCompleted, true, now, StatusUnknown, DeleteNothing, nil},
		{task.StatusRunning, false, t0.Add(Retention), StatusUnknown, DeleteNothing, nil},
	}
	for _, tc := range tests {
		got := StatusOf(task.Task{Status: tc.status, Deleted: tc.deleted, CreatedAt: t0}, tc.at)
		if got != tc.want {
			t.Errorf("StatusOf(%s, deleted %v) = %s, want %s", tc.status, tc.deleted, got, tc.want)
		}
		action, err := DecideDelete(got)
		if action != tc.action || !errors.Is(err, tc.err) {
			t.Errorf("DecideDelete(%s) = %v, %v; want %v, %v", got, action, err, tc.action, tc.err)
		}
	}
}

func TestNewCatalogRefusesBadModels(t *testing.T) {
	tests := map[string][]Model{
		"none":               nil,
		"no id":              {{Type: TextToVideo}},
		"twice":              {{ID: "a", Type: TextToVideo}, {ID: "a", Type: TextToVideo}},
		"bad type":           {{ID: "a", Type: "x"}},
		"bad resolution":     {{ID: "a", Type: TextToVideo, Resolutions: []string{"4K"}}},
		"default not listed": {{ID: "a", Type: TextToVideo, Resolutions: []string{"720P"}, DefaultResolution: "480P"}},
		"bad duration":       {{ID: "a", Type: TextToVideo, Durations: []int{0}, DefaultDuration: 0}},
	}
	for name, models := range tests {
		if _, err := NewCatalog(models); err == nil {
			t.Errorf("%s: NewCatalog accepted %+v", name, models)
		}
	}
	c, err := NewCatalog([]Model{{ID: "m", Type: ImageToVideo}})
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := c.Model("m"); m.DisplayName != "m" || m.DefaultResolution != "480P" || m.GPUs != "2" || c.DisplayName("gone") != "gone" {
		t.Errorf("defaults not filled: %+v", m)
	}
}

func TestRouting(t *testing.T) {
	r := Routing{Routes: DefaultRoutes(), Default: "standard"}
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	if got := r.For("premium"); got.Queue != "tenant-high-priority-queue" || got.Priority != 2 {
		t.Errorf("premium = %+v", got)
	}
	if got := r.For("unknown"); got.Queue != "tenant-low-priority-queue" || got.Priority != 5 {
		t.Errorf("unknown tier = %+v", got)
	}
	if err := (Routing{Routes: DefaultRoutes(), Default: "gold"}).Check(); err == nil {
		t.Error("a default tier without a route was accepted")
	}
	if err := (Routing{Routes: map[string]Route{"x": {Queue: "q", Priority: 11}}, Default: "x"}).Check(); err == nil {
		t.Error("priority 11 was accepted")
	}
}
