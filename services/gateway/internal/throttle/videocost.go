package throttle

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"unicode/utf8"
)

// Video request rules that the token cost follows
// (docs/api/video.md#the-request): the prompt is truncated to
// maxPromptRunes, and duration is 5 s when absent.
const (
	maxPromptRunes  = 800
	defaultDuration = 5
	// maxCostDuration bounds the duration the cost is computed from. The
	// video API accepts only 5; a larger value is refused there as
	// InvalidParameter, and must not be refused here first as too costly.
	maxCostDuration = 60
	// longString is the length (bytes between the quotes) past which a
	// string of the body is cut before the body is parsed (elideLongStrings).
	longString = 64 << 10
)

// videoGenerationPaths are the routes that create a video generation task.
var videoGenerationPaths = map[string]bool{
	"/v1/video/generations":     true,
	"/api/v1/video/generations": true,
}

// videoRequest is the part of a video generation request the cost needs.
type videoRequest struct {
	Input struct {
		Prompt string `json:"prompt"`
	} `json:"input"`
	Parameters struct {
		Duration json.Number `json:"duration"`
	} `json:"parameters"`
}

// VideoCost is the token cost of a video generation request body:
//
//	runes(prompt, truncated to 800) + perSecond × duration
//
// with duration 5 when absent, not a whole number in [1, 60], or when the
// body does not parse (the video API then refuses it; the cost still
// counts the attempt).
//
// The cost is what encoding/json makes of the body, but a first frame sent
// inline (a data: URI of up to 10 MB) is not parsed by encoding/json: its
// scanner reads about 340 MB/s here, 37 ms of the gateway's CPU for such a
// request before the request is even admitted. Every string longer than
// longString is checked and cut by elideLongStrings first, which leaves the
// cost as it was (docs/decisions/0130-video-cost-skips-long-strings.md).
func VideoCost(body []byte, perSecond int64) int64 {
	return videoCost(body, perSecond, maxPromptRunes, longString)
}

// videoCost is VideoCost with the prompt's rune limit and the length of a
// long string as parameters, so that a test can make both small.
func videoCost(body []byte, perSecond int64, maxRunes, long int) int64 {
	duration := int64(defaultDuration)
	if len(body) > long {
		short, ok := elideLongStrings(body, long, keptBytes(maxRunes))
		if !ok {
			return perSecond * duration
		}
		body = short
	}
	var req videoRequest
	if json.Unmarshal(body, &req) != nil {
		return perSecond * duration
	}
	if d, err := req.Parameters.Duration.Int64(); err == nil && d >= 1 && d <= maxCostDuration {
		duration = d
	}
	return int64(min(utf8.RuneCountInString(req.Input.Prompt), maxRunes)) + perSecond*duration
}

// keptBytes is how much of a long string elideLongStrings keeps so that a
// prompt cut to it still has more than maxRunes runes: a rune takes at
// most 12 bytes of JSON text (a surrogate pair, \uD83D\uDE00), so that
// many bytes of text decode to at least maxRunes+1 runes.
func keptBytes(maxRunes int) int { return 12 * (maxRunes + 1) }

// elideLongStrings returns body with every string of more than long bytes
// cut to its first keep bytes or a few more (never inside an escape), and
// ok = false when such a string is not a valid JSON string or has no
// closing quote, which makes the whole body one that does not parse.
//
// What encoding/json then makes of the result is what it makes of body:
//   - outside the long strings nothing changes, so a syntax error there
//     stays; inside them every byte is checked as encoding/json checks a
//     string (no control character, only its escapes), and the cut keeps
//     them valid;
//   - the cost reads only the prompt and the duration. A prompt cut to keep
//     bytes still has more than maxRunes runes (keptBytes), so its count
//     stays maxRunes. A duration given as a string counts only when the
//     string is a number, so a long string is cut only when its kept part
//     has a byte no number has, and is then no number before or after;
//   - keys are strings too: one that long matches no field before or after.
//
// The long strings are found by their quotes: outside a string every quote
// opens one, inside it the first quote not escaped closes it, and a string
// is read eight bytes at a time while none of them needs a look
// (specialByte).
func elideLongStrings(body []byte, long, keep int) (_ []byte, ok bool) {
	var out []byte
	copied := 0 // body[:copied] is in out
	for i := 0; i < len(body); {
		q := bytes.IndexByte(body[i:], '"')
		if q < 0 {
			break
		}
		start := i + q + 1
		end, cut, valid := scanString(body, start, keep)
		if end < 0 {
			// Unterminated: encoding/json refuses the body; short bodies
			// are left for it to say so.
			return nil, false
		}
		if end-start > long {
			if !valid {
				return nil, false
			}
			if !numberAlphabet(body[start:cut]) {
				if out == nil {
					out = make([]byte, 0, len(body)-(end-cut)+keep)
				}
				out = append(out, body[copied:cut]...)
				copied = end
			}
		}
		i = end + 1
	}
	if out == nil {
		return body, true
	}
	return append(out, body[copied:]...), true
}

// scanString reads the string whose text starts at body[start] (after its
// opening quote). end is the index of its closing quote (-1 when it has
// none), cut the first index at or past start+keep that is not inside an
// escape (end when there is none), and valid whether the text is a valid
// JSON string's: no byte below 0x20, every backslash one of JSON's escapes.
func scanString(body []byte, start, keep int) (end, cut int, valid bool) {
	valid, cut = true, -1
	for p := start; ; {
		for p+8 <= len(body) && !specialByte(binary.LittleEndian.Uint64(body[p:])) {
			p += 8
			if cut < 0 && p >= start+keep {
				cut = p
			}
		}
		if cut < 0 && p >= start+keep {
			cut = p
		}
		if p >= len(body) {
			return -1, -1, false
		}
		switch c := body[p]; {
		case c == '"':
			if cut < 0 {
				cut = p
			}
			return p, cut, valid
		case c == '\\':
			n := escapeLen(body[p:])
			if n == 0 {
				valid, n = false, 1
			}
			p += n
		case c < 0x20:
			valid = false
			p++
		default:
			p++
		}
	}
}

// escapeLen is the length of the escape at the start of s (s[0] is a
// backslash), 0 when it is not one of JSON's.
func escapeLen(s []byte) int {
	if len(s) < 2 {
		return 0
	}
	switch s[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(s) < 6 {
			return 0
		}
		for _, h := range s[2:6] {
			if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
				return 0
			}
		}
		return 6
	}
	return 0
}

// specialByte reports whether one of the eight bytes of w is below 0x20, a
// quote or a backslash: the bytes of a string's text that need a look.
// Each test is the usual one for a zero byte, (x − 0x01…) & ^x & 0x80…,
// which never misses one; a word it flags is read byte by byte.
func specialByte(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	below := (w - ones*0x20) & ^w
	return (below|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0
}

// numberAlphabet reports whether every byte of s can be part of a JSON
// number.
func numberAlphabet(s []byte) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			return false
		}
	}
	return true
}
