package shim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// setProgress records a progress report; the latest one wins, whichever
// source it came from.
func (s *server) setProgress(v int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.progress.Seq > 0 && s.progress.Value == v && s.progress.Message == msg {
		return
	}
	s.progress = Progress{Value: v, Message: msg, Seq: s.progress.Seq + 1}
}

// stdoutLine looks for "::progress::<0-100> [message]" on stdout. It sees
// every line, including those past the output cap.
func (s *server) stdoutLine(line []byte) {
	rest, ok := strings.CutPrefix(strings.TrimRight(string(line), "\r"), ProgressPrefix)
	if !ok {
		return
	}
	if v, msg, ok := ParseProgress(rest); ok {
		s.setProgress(v, msg)
	}
}

// pollProgressFile reads the progress file when its size or mtime changed.
func (s *server) pollProgressFile() {
	if s.spec.ProgressFile == "" {
		return
	}
	fi, err := os.Stat(s.spec.ProgressFile)
	if err != nil {
		return
	}
	stamp := fmt.Sprintf("%d/%d", fi.Size(), fi.ModTime().UnixNano())
	s.mu.Lock()
	same := stamp == s.fileStamp
	s.fileStamp = stamp
	s.mu.Unlock()
	if same {
		return
	}
	if line, ok := lastLine(s.spec.ProgressFile); ok {
		if v, msg, ok := ParseProgress(line); ok {
			s.setProgress(v, msg)
		}
	}
}

// ProgressPrefix marks a progress line on stdout.
const ProgressPrefix = "::progress::"

// ParseProgress parses "<0-100> [message]". Fractions are truncated and
// values outside 0..100 are refused.
func ParseProgress(line string) (value int, msg string, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" {
		return 0, "", false
	}
	num, rest, _ := strings.Cut(line, " ")
	f, err := strconv.ParseFloat(strings.TrimSuffix(num, "%"), 64)
	if err != nil || f < 0 || f > 100 {
		return 0, "", false
	}
	msg = strings.TrimSpace(rest)
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	return int(f), msg, true
}

// lastLine returns the last non-empty line of the file's final 4 KiB.
func lastLine(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", false
	}
	off := max(st.Size()-maxLine, 0)
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	lines := strings.Split(string(buf[:n]), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if s := strings.TrimSpace(lines[i]); s != "" {
			return s, true
		}
	}
	return "", false
}
