package video

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

// cellWidth is a rune's width in terminal-style cells: CJK ideographs and
// fullwidth forms take two, everything else one. Fonts draw a cell at about
// half an em, which is what the layout below assumes.
func cellWidth(r rune) int {
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

func textWidth(s string) int {
	n := 0
	for _, r := range s {
		n += cellWidth(r)
	}
	return n
}

// cleanText makes user text safe to draw: valid UTF-8, no control
// characters except line breaks, no surrounding space.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n':
			return r
		case r == '\t' || r == '\r' || unicode.IsControl(r):
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// wrap breaks text into lines of at most cols cells. Latin words move to
// the next line whole (a word longer than a line is cut); CJK text may
// break between any two characters; line breaks in the text are kept.
func wrap(text string, cols int) []string {
	cols = max(cols, 1)
	var lines []string
	for _, para := range strings.Split(text, "\n") {
		lines = append(lines, wrapParagraph(para, cols)...)
	}
	return lines
}

func wrapParagraph(p string, cols int) []string {
	var (
		lines []string
		line  strings.Builder
		used  int
	)
	flush := func() {
		lines = append(lines, strings.TrimRight(line.String(), " "))
		line.Reset()
		used = 0
	}
	for _, tok := range tokens(p) {
		if tok == " " {
			if used > 0 && used < cols {
				line.WriteByte(' ')
				used++
			}
			continue
		}
		w := textWidth(tok)
		if used > 0 && used+w > cols {
			flush()
		}
		for w > cols { // a word longer than a line: cut it
			cut, cw := 0, 0
			for i, r := range tok {
				if cw+cellWidth(r) > cols-used {
					cut = i
					break
				}
				cw += cellWidth(r)
			}
			if cut == 0 {
				_, cut = utf8.DecodeRuneInString(tok)
			}
			line.WriteString(tok[:cut])
			flush()
			tok = tok[cut:]
			w = textWidth(tok)
		}
		line.WriteString(tok)
		used += w
	}
	if used > 0 || len(lines) == 0 {
		flush()
	}
	return lines
}

// noLineStart are the fullwidth marks a line may not begin with.
const noLineStart = "，。、；：！？）」』】》〉…—～％"

// tokens splits a paragraph into break units: runs of narrow non-space
// characters (words), single wide characters (with any closing
// punctuation after them), and single spaces.
func tokens(p string) []string {
	var out []string
	word := -1
	for i, r := range p {
		switch {
		case r == ' ' || unicode.IsSpace(r):
			if word >= 0 {
				out = append(out, p[word:i])
				word = -1
			}
			out = append(out, " ")
		case cellWidth(r) == 2:
			if word >= 0 {
				out = append(out, p[word:i])
				word = -1
			}
			// Closing punctuation never starts a line: it goes with the
			// character before it.
			if strings.ContainsRune(noLineStart, r) && len(out) > 0 && out[len(out)-1] != " " {
				out[len(out)-1] += string(r)
				continue
			}
			out = append(out, string(r))
		default:
			if word < 0 {
				word = i
			}
		}
	}
	if word >= 0 {
		out = append(out, p[word:])
	}
	return out
}

// card is the laid-out title card.
type card struct {
	lines    []string
	fontSize int
	// lineHeight is the distance between two lines' tops, in pixels.
	lineHeight int
}

// Layout constants: text may use 88 % of the width and 80 % of the height;
// a cell is 0.55 em wide (a little more than most fonts need, so lines never
// overflow); lines are 1.35 em apart.
const (
	textWidthShare  = 0.88
	textHeightShare = 0.80
	emPerCell       = 0.55
	lineSpacing     = 1.35
)

// layoutCard picks the largest font size (from a tenth of the height down
// to a thirtieth, at least 10 px) at which the wrapped text fits the frame;
// text that does not fit even then is cut, its last line ending in "…".
func layoutCard(text string, w, h int) card {
	text = cleanText(text)
	largest := max(h/10, 10)
	smallest := max(h/30, 10)
	var c card
	for fs := largest; fs >= smallest; fs-- {
		c = fitCard(text, w, h, fs)
		if c.fits(h) {
			return c
		}
	}
	// Still too long at the smallest size: keep what fits.
	maxLines := max(int(float64(h)*textHeightShare)/c.lineHeight, 1)
	if len(c.lines) > maxLines {
		c.lines = c.lines[:maxLines]
		last := []rune(c.lines[maxLines-1])
		cols := int(float64(w) * textWidthShare / (emPerCell * float64(c.fontSize)))
		for len(last) > 0 && textWidth(string(last))+2 > cols {
			last = last[:len(last)-1]
		}
		c.lines[maxLines-1] = strings.TrimRight(string(last), " ") + "…"
	}
	return c
}

func fitCard(text string, w, h, fs int) card {
	cols := int(float64(w) * textWidthShare / (emPerCell * float64(fs)))
	return card{lines: wrap(text, cols), fontSize: fs, lineHeight: int(float64(fs)*lineSpacing + 0.5)}
}

func (c card) fits(h int) bool {
	return len(c.lines)*c.lineHeight <= int(float64(h)*textHeightShare)
}
