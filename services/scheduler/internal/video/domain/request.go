package domain

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// Documented limits (docs/api/video.md#the-request).
const (
	// MaxPromptChars: longer prompts are cut to this many characters (a
	// Chinese character and a letter count one each).
	MaxPromptChars = 800
	// MaxNegativePromptChars: likewise for negative_prompt.
	MaxNegativePromptChars = 500
	// MaxSeed is the largest seed; seeds start at 0.
	MaxSeed = math.MaxInt32
)

// Request is a generation request as received. Optional values are nil
// when the client left them out, so defaults apply.
type Request struct {
	Model, Type            string
	Prompt, NegativePrompt string
	// Image is the first frame: an http(s) URL or a data: URI.
	Image        string
	Resolution   string
	Duration     *int
	PromptExtend *bool
	Watermark    *bool
	Seed         *int64
	// VideoCount, when given, must be 1: a generation makes one video.
	VideoCount *int
	// Webhook is where the generation's end is notified ("" = the
	// tenant's default endpoint); the task spec checks it.
	Webhook string
}

// Plan is a valid request with its defaults filled in; what remains is to
// load the image (if any), size the output and rewrite the prompt.
type Plan struct {
	Model                  Model
	Type                   string
	Prompt, NegativePrompt string
	Image                  string
	Resolution             string
	Duration               int
	Seed                   int
	PromptExtend           bool
	Watermark              bool
}

// Normalize applies the documented rules to r: prompt required and cut to
// 800 characters, negative_prompt cut to 500, the model known (by id,
// display name or family, see Resolve; the plan names it by id) and of the
// requested type, the first frame required for image_to_video and refused
// for text_to_video, the resolution one of the model's (default its
// default), duration omitted or one the model makes, seed 0 to 2147483647
// (randomSeed() when omitted), prompt_extend on and watermark off unless
// asked otherwise. Every error is an *InvalidError naming the field.
func (c Catalog) Normalize(r Request, randomSeed func() int) (Plan, error) {
	if r.Model == "" {
		return Plan{}, invalid("model", "is required (one of %s)", c.IDs())
	}
	// The type is checked first: it may pick the model of a family.
	if r.Type != "" && r.Type != TextToVideo && r.Type != ImageToVideo {
		return Plan{}, invalid("type", "must be %s or %s, not %q", TextToVideo, ImageToVideo, r.Type)
	}
	m, ok := c.Resolve(r.Model, r.Type, strings.TrimSpace(r.Image) != "")
	if !ok {
		return Plan{}, invalid("model", "unknown model %q; available: %s", r.Model, c.IDs())
	}
	// prompt_extend is on unless the request turns it off: a nil pointer is
	// an omitted field, not false.
	p := Plan{Model: m, Type: r.Type, Image: r.Image, PromptExtend: true}
	switch {
	case p.Type == "":
		// An omitted type is the model's: every model makes exactly one
		// type, so there is nothing to guess.
		p.Type = m.Type
	case p.Type != m.Type:
		return Plan{}, invalid("type", "model %s makes %s, not %s", m.ID, m.Type, p.Type)
	}
	if strings.TrimSpace(r.Prompt) == "" {
		return Plan{}, invalid("input.prompt", "is required")
	}
	// Too long is cut, not refused, as the API documents: a long prompt is
	// still a usable request.
	p.Prompt = Truncate(r.Prompt, MaxPromptChars)
	p.NegativePrompt = Truncate(r.NegativePrompt, MaxNegativePromptChars)
	// A text_to_video may carry an image too: the API's document marks
	// image required for every generation. It is checked like a first
	// frame (bad input is refused whatever the type) and not used, since
	// a text_to_video has no first frame (docs/api/video.md, the request).
	if strings.TrimSpace(p.Image) == "" {
		if p.Type == ImageToVideo {
			return Plan{}, invalid("input.image", "is required for %s: a public http(s) URL or data:{MIME_type};base64,{data}", ImageToVideo)
		}
		p.Image = ""
	}
	// Case and spaces are forgiven ("720p"); the error names what the client
	// sent.
	p.Resolution = strings.ToUpper(strings.TrimSpace(r.Resolution))
	if p.Resolution == "" {
		p.Resolution = m.DefaultResolution
	}
	if !slices.Contains(m.Resolutions, p.Resolution) {
		return Plan{}, invalid("parameters.resolution", "%s offers %s, not %q", m.ID, strings.Join(m.Resolutions, ", "), r.Resolution)
	}
	p.Duration = m.DefaultDuration
	if r.Duration != nil {
		if !slices.Contains(m.Durations, *r.Duration) {
			return Plan{}, invalid("parameters.duration", "%s makes videos of %s seconds, not %d", m.ID, joinInts(m.Durations), *r.Duration)
		}
		p.Duration = *r.Duration
	}
	if r.VideoCount != nil && *r.VideoCount != 1 {
		return Plan{}, invalid("parameters.video_count", "is fixed at 1, not %d", *r.VideoCount)
	}
	if r.Seed != nil {
		if *r.Seed < 0 || *r.Seed > MaxSeed {
			return Plan{}, invalid("parameters.seed", "must be 0 to %d, not %d", MaxSeed, *r.Seed)
		}
		p.Seed = int(*r.Seed)
	} else {
		// Drawn here and reported back, so any generation can be reproduced
		// with the seed it actually used.
		p.Seed = randomSeed()
	}
	if r.PromptExtend != nil {
		p.PromptExtend = *r.PromptExtend
	}
	if r.Watermark != nil {
		p.Watermark = *r.Watermark
	}
	return p, nil
}

// Truncate cuts s to at most n characters (runes): "每个汉字/字母占一个字符".
func Truncate(s string, n int) string {
	count := 0
	// Ranging over a string steps by rune, so the cut never splits a
	// multi-byte character; counting runes makes a Chinese character and a
	// letter one each.
	for i := range s {
		if count == n {
			return s[:i]
		}
		count++
	}
	return s
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " or ")
}

// Frames is how many frames a video of the plan's duration has.
func (p Plan) Frames() int { return p.Duration*p.Model.FPS + 1 }

// OutputSize is the video's size in pixels: the tier's 16:9 size for
// text_to_video; for image_to_video about the tier's pixel count in the
// image's aspect ratio, both sides multiples of 16 (what the model's
// patching needs).
func OutputSize(resolution, typ string, imageW, imageH int) (w, h int) {
	tier := tierSizes[resolution]
	if typ != ImageToVideo || imageW <= 0 || imageH <= 0 {
		return tier[0], tier[1]
	}
	// Keep the tier's pixel count and the image's shape: the output neither
	// stretches the first frame nor leaves the tier's size.
	area := float64(tier[0] * tier[1])
	ratio := float64(imageW) / float64(imageH)
	hf := math.Sqrt(area / ratio)
	return round16(hf * ratio), round16(hf)
}

func round16(v float64) int {
	// At least one patch: an extreme aspect ratio must not round a side to
	// 0.
	return max(16, int(math.Round(v/16))*16)
}

// ResolutionLabel is the tier as answers show it: "720P" → "720".
func ResolutionLabel(resolution string) string { return strings.TrimSuffix(resolution, "P") }
