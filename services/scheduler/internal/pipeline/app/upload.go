package app

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"

	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// contentTypes of stored inputs.
var contentTypes = map[domain.Kind]string{
	domain.KindModel:    "application/octet-stream",
	domain.KindQuant:    "application/zip",
	domain.KindRefImage: "application/octet-stream",
}

// Upload streams body into the object store as an input of kind for c's
// tenant and returns it. The content is judged by its first bytes before
// anything is stored (a quant archive also by its end: a zip ends with
// its central directory; a reference image by Config.CheckImage); a body
// above the kind's limit is ErrTooLarge.
// Nothing is kept when it is refused.
func (a *App) Upload(ctx context.Context, c sched.Caller, kind, filename string, body io.Reader) (Upload, error) {
	tenant, err := tenantOf(c)
	if err != nil {
		return Upload{}, err
	}
	k, err := domain.ParseKind(kind)
	if err != nil {
		return Upload{}, err
	}
	limit := a.cfg.UploadLimits[k]
	in := bufio.NewReaderSize(&limitedReader{r: body, left: limit}, 64<<10)
	tooLarge := fmt.Errorf("%w: a %s upload may have at most %d bytes", ErrTooLarge, k, limit)
	head, err := in.Peek(domain.SniffBytes)
	switch {
	case errors.Is(err, ErrTooLarge):
		return Upload{}, tooLarge
	case err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull):
		return Upload{}, err
	}
	if err := k.CheckStart(head); err != nil {
		return Upload{}, err
	}
	// A reference image (at most its kind's limit, 32 MiB by default) is
	// read whole and decoded before anything is stored.
	var src io.Reader = in
	if k == domain.KindRefImage && a.cfg.CheckImage != nil {
		whole, err := io.ReadAll(in)
		switch {
		case errors.Is(err, ErrTooLarge):
			return Upload{}, tooLarge
		case err != nil:
			return Upload{}, err
		}
		if err := a.cfg.CheckImage(whole); err != nil {
			return Upload{}, err
		}
		src = bytes.NewReader(whole)
	}
	u := Upload{Key: "uploads/" + uuid.NewString() + "/" + domain.UploadName(k, filename), TenantID: tenant, Kind: k,
		Name: domain.UploadName(k, filename), CreatedAt: a.now()}
	h := sha256.New()
	var seen io.Writer = h
	tail := &tailBuffer{max: zipTailBytes}
	if k == domain.KindQuant {
		seen = io.MultiWriter(h, tail)
	}
	info, err := a.cfg.Objects.Put(ctx, u.Key, io.TeeReader(src, seen), -1, contentTypes[k])
	if err != nil {
		a.remove(ctx, u.Key)
		if errors.Is(err, ErrTooLarge) {
			return Upload{}, tooLarge
		}
		return Upload{}, fmt.Errorf("pipeline: storing the upload: %w", err)
	}
	if k == domain.KindQuant && !zipEnd(tail.bytes()) {
		a.remove(ctx, u.Key)
		return Upload{}, domain.Invalid("file", "is not a complete zip archive (no end of central directory)")
	}
	u.Size, u.SHA256 = info.Size, hex.EncodeToString(h.Sum(nil))
	if err := a.cfg.Uploads.SaveUpload(ctx, u); err != nil {
		a.remove(ctx, u.Key)
		return Upload{}, err
	}
	return u, nil
}

// remove deletes an object nothing refers to; a failure is logged: the
// object is unreachable anyway.
func (a *App) remove(ctx context.Context, key string) {
	if err := a.cfg.Objects.Delete(context.WithoutCancel(ctx), key); err != nil {
		a.cfg.Log.Warn("pipeline: removing an object failed", "key", key, "err", err)
	}
}

// limitedReader fails with ErrTooLarge once more than left bytes were
// asked of it, so the store aborts the write instead of keeping a cut file.
type limitedReader struct {
	r    io.Reader
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return 0, ErrTooLarge
	}
	return n, err
}

// zipTailBytes holds a zip's end of central directory record: 22 bytes
// and a comment of up to 65535.
const zipTailBytes = 22 + 65535

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte { return t.buf }

// zipEnd reports whether tail ends with a zip's end of central directory
// record (its signature, then 18 bytes, the last two the comment's length,
// then the comment).
func zipEnd(tail []byte) bool {
	for i := len(tail) - 22; i >= 0; i-- {
		if !bytes.Equal(tail[i:i+4], []byte("PK\x05\x06")) {
			continue
		}
		comment := int(tail[i+20]) | int(tail[i+21])<<8
		if i+22+comment == len(tail) {
			return true
		}
	}
	return false
}
