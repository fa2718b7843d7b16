package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskmesh/taskmesh/platform/objectstore"
	sched "github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
)

// GetJob returns one of c's jobs as of every acknowledged change.
func (a *App) GetJob(ctx context.Context, c sched.Caller, id string) (domain.Job, error) {
	tenant, err := tenantOf(c)
	if err != nil {
		return domain.Job{}, err
	}
	return a.cfg.Jobs.Get(ctx, tenant, id)
}

// Links are signed download links of a job's objects; "" where the
// object does not exist (yet).
type Links struct {
	JobID    string
	TTL      time.Duration
	BIE, NEF string
	Logs     map[domain.Stage]string
}

// Downloads signs links to job id's results and stage logs.
func (a *App) Downloads(ctx context.Context, c sched.Caller, id string) (Links, error) {
	job, err := a.GetJob(ctx, c, id)
	if err != nil {
		return Links{}, err
	}
	l := Links{JobID: job.ID, TTL: a.cfg.LinkTTL, Logs: map[domain.Stage]string{}}
	if l.BIE, l.NEF, err = a.OutputLinks(ctx, job); err != nil {
		return Links{}, err
	}
	for _, s := range domain.Stages() {
		key := domain.LogObject(job.ID, s)
		switch _, err := a.cfg.Objects.Stat(ctx, key); {
		case errors.Is(err, objectstore.ErrNotFound):
			continue
		case err != nil:
			return Links{}, fmt.Errorf("pipeline: %s: %w", key, err)
		}
		if l.Logs[s], err = a.link(ctx, key); err != nil {
			return Links{}, err
		}
	}
	return l, nil
}

// OutputLinks signs a GET link, valid for LinkTTL, to each result the job
// has ("" for one it does not have yet): GET /jobs/{job_id} shows them
// beside the keys.
func (a *App) OutputLinks(ctx context.Context, job domain.Job) (bie, nef string, err error) {
	if k := job.Output(domain.StageBIE); k != "" {
		if bie, err = a.link(ctx, k); err != nil {
			return "", "", err
		}
	}
	if k := job.Output(domain.StageNEF); k != "" {
		if nef, err = a.link(ctx, k); err != nil {
			return "", "", err
		}
	}
	return bie, nef, nil
}

func (a *App) link(ctx context.Context, key string) (string, error) {
	u, err := a.cfg.Objects.PresignGet(ctx, key, a.cfg.LinkTTL)
	if err != nil {
		return "", fmt.Errorf("pipeline: signing %s: %w", key, err)
	}
	return u, nil
}
