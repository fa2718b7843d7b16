package throttle

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// encodingJSONCost is the cost as encoding/json alone makes it of the
// whole body, every string read: what videoCost must give for any body.
func encodingJSONCost(body []byte, perSecond int64, maxRunes int) int64 {
	var req videoRequest
	duration := int64(defaultDuration)
	if json.Unmarshal(body, &req) != nil {
		return perSecond * duration
	}
	if d, err := req.Parameters.Duration.Int64(); err == nil && d >= 1 && d <= maxCostDuration {
		duration = d
	}
	return int64(min(utf8.RuneCountInString(req.Input.Prompt), maxRunes)) + perSecond*duration
}

// A request with a first frame inline costs its prompt and duration, as
// one without; a long string that is not a valid JSON string makes the
// body one that does not parse, as encoding/json has it.
func TestVideoCostOfLongStrings(t *testing.T) {
	image := "data:image/png;base64," + base64.StdEncoding.EncodeToString(make([]byte, 3*longString))
	digits := strings.Repeat("7", 2*longString)
	tests := []struct {
		name string
		body string
		want int64
	}{
		{"a first frame inline", `{"model":"wan2.2-i2v","input":{"prompt":"a cat","image":"` + image + `"},"parameters":{"duration":10}}`, 5 + 1000},
		{"the frame before the prompt", `{"input":{"image":"` + image + `","prompt":"a cat"}}`, 5 + 500},
		{"escapes in the frame", `{"input":{"prompt":"ab","image":"` + strings.Repeat(`\"\\\/\b\f\n\r\t\u00e9`, longString/10) + `"}}`, 2 + 500},
		{"a long prompt counts 800 runes", `{"input":{"prompt":"` + strings.Repeat("视", longString) + `"}}`, 800 + 500},
		{"a long prompt of surrogate pairs", `{"input":{"prompt":"` + strings.Repeat(`\uD83D\uDE00`, longString/12+1) + `"}}`, 800 + 500},
		{"a long key matches nothing", `{"input":{"` + strings.Repeat("p", 2*longString) + `":"x","prompt":"abc"}}`, 3 + 500},
		{"a long duration of digits is not a whole number in range", `{"input":{"prompt":"ab"},"parameters":{"duration":"` + digits + `"}}`, 2 + 500},
		{"a long duration with a letter does not parse", `{"input":{"prompt":"ab"},"parameters":{"duration":"` + digits + `x"}}`, 500},
		{"a control character deep in the frame", `{"input":{"prompt":"ab","image":"` + image + "\x01" + `"}}`, 500},
		{"a bad escape deep in the frame", `{"input":{"prompt":"ab","image":"` + image + `\x"}}`, 500},
		{"a short \\u escape at the end of the frame", `{"input":{"prompt":"ab","image":"` + image + `\u12"}}`, 500},
		{"an unterminated frame", `{"input":{"prompt":"ab","image":"` + image, 500},
		{"a syntax error after the frame", `{"input":{"prompt":"ab","image":"` + image + `"}} x`, 500},
		{"the frame as the wrong type", `{"input":"` + image + `"}`, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if ref := encodingJSONCost([]byte(tt.body), 100, maxPromptRunes); ref != tt.want {
				t.Fatalf("the case is wrong: encoding/json gives %d, the case wants %d", ref, tt.want)
			}
			if got := VideoCost([]byte(tt.body), 100); got != tt.want {
				t.Errorf("VideoCost = %d, want %d", got, tt.want)
			}
		})
	}
}

// The cut leaves a prompt more runes than the limit, whatever its text.
func TestKeptBytesHoldMoreRunesThanTheLimit(t *testing.T) {
	for _, unit := range []string{`\uD83D\uDE00`, `\uD800`, "😀", "\xff", "a", `\n`} {
		n := keptBytes(maxPromptRunes)/len(unit) + 1
		var s string
		if err := json.Unmarshal([]byte(`"`+strings.Repeat(unit, n)+`"`), &s); err != nil {
			t.Fatal(err)
		}
		if got := utf8.RuneCountInString(s); got <= maxPromptRunes {
			t.Errorf("%q: %d bytes of text decode to %d runes", unit, n*len(unit), got)
		}
	}
}

// Every byte below 0x20, every quote and every backslash is seen, at any
// place in the word, among bytes that are none of them, and no other byte
// is.
func TestSpecialByteMissesNone(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := c < 0x20 || c == '"' || c == '\\'
		for pos := range 8 {
			for _, other := range []byte{'a', 0x7f, 0x80, 0xff, 0x20, 0x21, 0x5b, 0x5d} {
				var word [8]byte
				for i := range word {
					word[i] = other
				}
				word[pos] = byte(c)
				w := uint64(0)
				for i := 7; i >= 0; i-- {
					w = w<<8 | uint64(word[i])
				}
				if got := specialByte(w); got != want {
					t.Fatalf("byte %#x at %d among %#x: specialByte = %v", c, pos, other, got)
				}
			}
		}
	}
}

// With a limit of 3 runes and strings long past 64 bytes, any body costs
// what encoding/json makes of it whole.
func FuzzVideoCostAsEncodingJSON(f *testing.F) {
	const maxRunes, long = 3, 64
	frame := strings.Repeat("iVBORw0KGgo", 20)
	for _, seed := range []string{
		`{"input":{"prompt":"hello"}}`,
		`{"input":{"prompt":"a cat","image":"data:image/png;base64,` + frame + `"},"parameters":{"duration":10}}`,
		`{"input":{"image":"` + frame + `\n\t\u00e9` + frame + `","prompt":"视频生成"}}`,
		`{"input":{"prompt":"` + strings.Repeat(`\uD83D\uDE00`, 10) + `"}}`,
		`{"parameters":{"duration":"` + strings.Repeat("1", 80) + `"}}`,
		`{"parameters":{"duration":"` + strings.Repeat("1", 80) + `e"}}`,
		`{"input":{"prompt":"ab","image":"` + frame + "\x01" + `"}}`,
		`{"input":{"prompt":"ab","image":"` + frame + `\u12"}}`,
		`{"input":{"prompt":"ab","image":"` + frame,
		`{"INPUT":{"Prompt":"` + frame + `"}}`,
		`{"input":"` + frame + `"}`,
		`[` + frame + `]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		want := encodingJSONCost(body, 100, maxRunes)
		if got := videoCost(body, 100, maxRunes, long); got != want {
			t.Fatalf("videoCost(%q) = %d, encoding/json gives %d", body, got, want)
		}
	})
}

// BenchmarkVideoCost measures the cost of a request with a 9 MiB first
// frame inline and of a small one.
func BenchmarkVideoCost(b *testing.B) {
	image := "data:image/png;base64," + base64.StdEncoding.EncodeToString(make([]byte, 9<<20))
	for _, bc := range []struct {
		name string
		body []byte
	}{
		{"frame-inline", []byte(`{"model":"wan2.2-i2v","input":{"prompt":"a cat on a sofa","image":"` + image + `"},"parameters":{"duration":5}}`)},
		{"text-only", []byte(`{"model":"wan2.2-t2v","input":{"prompt":"a cat on a sofa"},"parameters":{"duration":5,"seed":7}}`)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				VideoCost(bc.body, 10)
			}
		})
	}
}
