package video

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestWrap(t *testing.T) {
	tests := []struct {
		name string
		text string
		cols int
		want []string
	}{
		{name: "words move whole", text: "a cat runs across the grass", cols: 10, want: []string{"a cat runs", "across the", "grass"}},
		{name: "long word is cut", text: "abcdefghijkl", cols: 5, want: []string{"abcde", "fghij", "kl"}},
		{name: "CJK breaks anywhere", text: "一只猫在草地上奔跑", cols: 6, want: []string{"一只猫", "在草地", "上奔跑"}},
		{name: "closing punctuation stays with its character", text: "一只猫，在草地上奔跑。", cols: 6, want: []string{"一只", "猫，在", "草地上", "奔跑。"}},
		{name: "mixed", text: "AI 视频 demo", cols: 6, want: []string{"AI 视", "频", "demo"}},
		{name: "line breaks kept", text: "one\ntwo", cols: 20, want: []string{"one", "two"}},
		{name: "empty", text: "", cols: 10, want: []string{""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := wrap(tc.text, tc.cols); !slices.Equal(got, tc.want) {
				t.Errorf("wrap(%q, %d) = %q, want %q", tc.text, tc.cols, got, tc.want)
			}
		})
	}
}

func TestCleanText(t *testing.T) {
	if got := cleanText("  a\tb\r\nc\x00d\xffe  "); got != "a b\nc d\uFFFDe" {
		t.Errorf("cleanText = %q", got)
	}
}

func TestLayoutCardFitsTheFrame(t *testing.T) {
	long := strings.Repeat("一只猫在草地上奔跑，", 80)
	tests := []struct {
		name          string
		text          string
		w, h          int
		wantEllipsis  bool
		wantLargeFont bool
	}{
		{name: "short prompt, large type", text: "A cat", w: 832, h: 480, wantLargeFont: true},
		{name: "800 characters fit 480P", text: long[:len(long)/2], w: 832, h: 480},
		{name: "too long for a tiny frame is cut", text: long, w: 64, h: 36, wantEllipsis: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := layoutCard(tc.text, tc.w, tc.h)
			if len(c.lines)*c.lineHeight > int(float64(tc.h)*textHeightShare) && !tc.wantEllipsis {
				t.Errorf("%d lines of %d px overflow %d px", len(c.lines), c.lineHeight, tc.h)
			}
			cols := int(float64(tc.w) * textWidthShare / (emPerCell * float64(c.fontSize)))
			for _, l := range c.lines {
				if textWidth(l) > cols+2 { // closing punctuation may hang
					t.Errorf("line %q is %d cells, the frame holds %d", l, textWidth(l), cols)
				}
			}
			last := c.lines[len(c.lines)-1]
			if strings.HasSuffix(last, "…") != tc.wantEllipsis {
				t.Errorf("last line %q: ellipsis %v, want %v", last, !tc.wantEllipsis, tc.wantEllipsis)
			}
			if tc.wantLargeFont && c.fontSize != tc.h/10 {
				t.Errorf("font %d px, want the largest (%d)", c.fontSize, tc.h/10)
			}
		})
	}
}

func TestProgressParser(t *testing.T) {
	p := progressParser{total: 5 * time.Second}
	var got []int
	for _, line := range []string{
		"frame=0", "out_time_us=N/A", "progress=continue",
		"out_time_us=1000000", "progress=continue",
		"out_time_us=1000000", // no change: nothing reported
		"out_time_us=500000",  // backwards: ignored
		"out_time_us=4000000", "progress=continue",
		"out_time_us=6000000", // past the end: held at 99
		"progress=end",
	} {
		if v, ok := p.line(line); ok {
			got = append(got, v)
		}
	}
	if want := []int{20, 80, 99}; !slices.Equal(got, want) {
		t.Errorf("progress %v, want %v", got, want)
	}
}

func TestPaletteFollowsTheSeed(t *testing.T) {
	a0, a1 := palette(42)
	b0, b1 := palette(42)
	c0, _ := palette(43)
	if a0 != b0 || a1 != b1 {
		t.Error("the same seed gave different colours")
	}
	if a0 == c0 {
		t.Error("neighbouring seeds gave the same colour")
	}
	for _, c := range []string{a0, a1, c0} {
		if len(c) != 8 || !strings.HasPrefix(c, "0x") {
			t.Errorf("colour %q is not 0xRRGGBB", c)
		}
	}
}
