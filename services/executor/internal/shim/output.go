package shim

import (
	"bytes"
	"io"
	"os"
	"sync"
)

// capture stores one output stream: the first limit bytes go to the file,
// the rest is only counted; the last tailSize bytes are kept in memory.
type capture struct {
	mu       sync.Mutex
	f        *os.File
	limit    int64
	kept     int64
	total    int64
	tail     []byte
	tailSize int
	// onLine, if set, receives every complete line (up to maxLine bytes;
	// longer lines are cut), including lines past the cap.
	onLine  func(line []byte)
	line    []byte
	overrun bool
}

const maxLine = 4096

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if room := c.limit - c.kept; room > 0 {
		chunk := p
		if int64(len(chunk)) > room {
			chunk = chunk[:room]
		}
		n, _ := c.f.Write(chunk)
		c.kept += int64(n)
	}
	if c.tailSize > 0 {
		c.tail = append(c.tail, p...)
		if len(c.tail) > 2*c.tailSize {
			c.tail = append(c.tail[:0], c.tail[len(c.tail)-c.tailSize:]...)
		}
	}
	if c.onLine != nil {
		c.scanLines(p)
	}
	return len(p), nil
}

func (c *capture) scanLines(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.appendLine(p)
			return
		}
		c.appendLine(p[:i])
		if !c.overrun {
			c.onLine(c.line)
		}
		c.line, c.overrun = c.line[:0], false
		p = p[i+1:]
	}
}

func (c *capture) appendLine(p []byte) {
	if c.overrun {
		return
	}
	if len(c.line)+len(p) > maxLine {
		c.overrun = true
		return
	}
	c.line = append(c.line, p...)
}

// result returns (total, dropped, tail).
func (c *capture) result() (int64, int64, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tail
	if len(t) > c.tailSize {
		t = t[len(t)-c.tailSize:]
	}
	return c.total, c.total - c.kept, append([]byte(nil), t...)
}

// pump copies r into c until EOF or until r is closed.
func pump(r io.Reader, c *capture) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
