package rewrite

import (
	"context"
	"hash/fnv"
	"strings"
	"unicode"
)

// Rules is the rule-based rewriter. A prompt containing a Chinese character
// is extended in Chinese, any other in English: the model was trained on
// both, and mixing languages in one prompt weakens it. One phrase is chosen
// from each of the style, lighting and camera lists by a hash of the
// prompt, so the same prompt always reads the same way (the seed then makes
// the generation reproducible) while different prompts get variety.
type Rules struct{}

type phrases struct {
	sep                     string
	style, lighting, camera []string
}

var (
	chinese = phrases{sep: "，",
		style:    []string{"电影级画质", "写实风格，细节丰富", "高清画质，色彩自然"},
		lighting: []string{"柔和的自然光", "温暖的黄昏光线", "明亮的晴天光"},
		camera:   []string{"镜头缓慢推进", "平稳的跟随镜头", "广角镜头，画面稳定"},
	}
	english = phrases{sep: ", ",
		style:    []string{"cinematic quality", "photorealistic, richly detailed", "high definition, natural colours"},
		lighting: []string{"soft natural light", "warm golden-hour light", "bright daylight"},
		camera:   []string{"slow push-in shot", "smooth tracking shot", "steady wide-angle shot"},
	}
)

// Rewrite implements the rewriter; it cannot fail.
func (Rules) Rewrite(_ context.Context, prompt string) (string, error) {
	p := english
	for _, r := range prompt {
		if unicode.Is(unicode.Han, r) {
			p = chinese
			break
		}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(prompt))
	n := int(h.Sum32() % 3)
	base := strings.TrimRight(strings.TrimSpace(prompt), "。.，,;；!！ ")
	return strings.Join([]string{base, p.style[n], p.lighting[(n+1)%3], p.camera[(n+2)%3]}, p.sep), nil
}
