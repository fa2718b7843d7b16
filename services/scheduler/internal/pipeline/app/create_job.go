package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// CreateJob starts a job on uploads of c's tenant: it checks the keys
// (present, of the right kind when they are the tenant's), copies the
// inputs to the job's layout, records the job and queues its ONNX stage.
// A request it refuses creates nothing. The uploads are marked used before
// they are copied, so the upload sweeper never deletes an object a job is
// being created from; an upload that expired is refused with its own
// reason. A key that names no upload of the tenant (unknown, or another
// tenant's) is not refused: the design has clients put inputs in the store
// themselves and name them, so the scheduler takes the key and the job's
// stage finds no input there, as it would a file that never arrived. The
// job fails at that stage (docs/decisions/0113-job-keys-that-name-no-upload.md); nothing of
// another tenant's is read. The job it returns is ONNX, or FAILED when its
// first stage could not be queued.
func (a *App) CreateJob(ctx context.Context, c sched.Caller, r domain.JobRequest) (domain.Job, error) {
	tenant, err := tenantOf(c)
	if err != nil {
		return domain.Job{}, err
	}
	if err := r.Check(); err != nil {
		return domain.Job{}, err
	}
	model, err := a.input(ctx, tenant, "model_key", r.ModelKey, domain.KindModel)
	if err != nil {
		return domain.Job{}, err
	}
	quant, err := a.input(ctx, tenant, "quant_key", r.QuantKey, domain.KindQuant)
	if err != nil {
		return domain.Job{}, err
	}
	images := make([]*Upload, len(r.RefImageKeys))
	for i, k := range r.RefImageKeys {
		if images[i], err = a.input(ctx, tenant, fmt.Sprintf("ref_image_keys[%d]", i), k, domain.KindRefImage); err != nil {
			return domain.Job{}, err
		}
	}
	// The uploads found are marked used; keys that name none are left out.
	fields := map[string]string{}
	var keys []string
	use := func(u *Upload, field string) {
		if u != nil {
			fields[u.Key] = field
			keys = append(keys, u.Key)
		}
	}
	use(model, "model_key")
	use(quant, "quant_key")
	for i, u := range images {
		use(u, fmt.Sprintf("ref_image_keys[%d]", i))
	}
	if len(keys) > 0 {
		if err := a.cfg.Uploads.UseUploads(ctx, tenant, keys, a.now()); err != nil {
			if e := (*UploadExpiredError)(nil); errors.As(err, &e) {
				return domain.Job{}, a.expired(fields[e.Key], e.Key)
			}
			return domain.Job{}, err
		}
	}
	id := uuid.NewString() // version 4
	inputs := domain.Inputs{Model: domain.ModelObject(id), Quant: domain.QuantObject(id)}
	copies := map[string]string{}
	if model != nil {
		copies[model.Key] = inputs.Model
	}
	if quant != nil {
		copies[quant.Key] = inputs.Quant
	}
	for i, u := range images {
		name := missingRefImage
		if u != nil {
			name = u.Name
		}
		obj := domain.RefImageObject(id, i, name)
		inputs.RefImages = append(inputs.RefImages, obj)
		if u != nil {
			copies[u.Key] = obj
		}
	}
	if err := a.copyInputs(ctx, copies); err != nil {
		return domain.Job{}, err
	}
	job, err := a.cfg.Jobs.Create(ctx, domain.Submit(a.now(), id, tenant, c.Subject, c.IP, inputs,
		domain.InputKeys{Model: r.ModelKey, Quant: r.QuantKey, RefImages: r.RefImageKeys}))
	if err != nil {
		for _, obj := range copies {
			a.remove(ctx, obj)
		}
		return domain.Job{}, err
	}
	// The job is recorded: a failure to queue its stage from here on is
	// retried by the reconciliation sweep, not returned.
	if j, _, err := a.queue(ctx, job, domain.StageONNX); err == nil {
		job = j
	} else {
		a.cfg.Log.Warn("pipeline: queueing the onnx stage failed; the sweep retries", "job_id", id, "err", err)
	}
	return job, nil
}

// missingRefImage names, in the job's layout, a reference image whose key
// named no upload: nothing is copied there.
const missingRefImage = "missing"

// input reads the upload key names for field and checks that it is of
// kind. It returns nil for a key that names no upload of the tenant's
// (CreateJob takes it all the same) and refuses one of another kind, or
// one that expired.
func (a *App) input(ctx context.Context, tenant, field, key string, kind domain.Kind) (*Upload, error) {
	u, err := a.cfg.Uploads.Upload(ctx, tenant, key)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case !u.ExpiredAt.IsZero():
		return nil, a.expired(field, key)
	case u.Kind != kind:
		return nil, domain.Invalid(field, "upload %q is a %s, not a %s", key, u.Kind, kind)
	}
	return &u, nil
}

// expired is the refusal of an upload key that expired unused
// (docs/api/pipeline.md, "Uploads").
func (a *App) expired(field, key string) error {
	ttl := strings.TrimSuffix(strings.TrimSuffix(a.cfg.UploadTTL.String(), "0s"), "0m")
	return domain.Invalid(field, "upload %q expired: no job used it within %s of its upload, so it was deleted; upload the file again", key, ttl)
}

// copyInputs copies each upload to its place in the job's layout; on a
// failure it removes what it copied. The store copies without moving the
// bytes where it can (a link on FS, a server-side copy on S3), so a job
// on a large model costs no more to create than one on a small model.
func (a *App) copyInputs(ctx context.Context, copies map[string]string) error {
	var done []string
	for from, to := range copies {
		if _, err := a.cfg.Objects.Copy(ctx, from, to); err != nil {
			for _, obj := range done {
				a.remove(ctx, obj)
			}
			if errors.Is(err, objectstore.ErrNotFound) {
				return domain.Invalid("keys", "the upload %q is gone; upload it again", from)
			}
			return fmt.Errorf("pipeline: copying %s: %w", from, err)
		}
		done = append(done, to)
	}
	return nil
}
