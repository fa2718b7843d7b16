package app

import (
	"context"
	"fmt"
)

// uploadSweepBatch bounds the uploads one step of SweepUploads handles.
const uploadSweepBatch = 200

// SweepUploads expires the uploads no job used within UploadTTL of their
// upload (docs/api/pipeline.md, "Uploads"): each is marked expired, so
// its key is refused from then on, and then its object is deleted. An
// upload a job was created from is kept: the job names it (and has its
// own copy of it in its layout). It returns how many objects it deleted.
//
// The mark comes first and commits before the deletion: CreateJob marks
// its uploads used before it copies them, so a deletion never pulls an
// object from under a job being created. A deletion that fails is retried
// on the next pass (the upload stays expired but not purged).
func (a *App) SweepUploads(ctx context.Context) (int, error) {
	n := 0
	for {
		now := a.now()
		batch, err := a.cfg.Uploads.ExpireUploads(ctx, now.Add(-a.cfg.UploadTTL), now, uploadSweepBatch)
		if err != nil {
			return n, err
		}
		var purged []string
		for _, u := range batch {
			if err := a.cfg.Objects.Delete(ctx, u.Key); err != nil {
				a.cfg.Log.Warn("pipeline: deleting an expired upload failed; the next sweep retries", "key", u.Key, "err", err)
				continue
			}
			purged = append(purged, u.Key)
			a.metrics.uploadExpired(ctx, u)
		}
		if len(purged) > 0 {
			if err := a.cfg.Uploads.UploadsPurged(ctx, purged, now); err != nil {
				return n, fmt.Errorf("pipeline: recording deleted uploads: %w", err)
			}
		}
		n += len(purged)
		// A short batch was the last; a batch of failed deletions is left
		// for the next pass rather than read again at once.
		if len(batch) < uploadSweepBatch || len(purged) == 0 {
			return n, nil
		}
	}
}
