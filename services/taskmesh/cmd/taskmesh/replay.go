package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/scheduler"
)

func replayCommand() *cobra.Command {
	var (
		c      common
		keep   bool
		inline bool
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Rebuild the scheduler's projections from the event log into fresh tables and compare them with the live ones",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.run(cmd, "replay", func(ctx context.Context, p *process) error {
				return replay(ctx, cmd.OutOrStdout(), c.databaseURL, p, keep, inline)
			})
		},
	}
	c.flags(cmd)
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the replay tables for inspection")
	cmd.Flags().BoolVar(&inline, "rebuild-inline", false, "also replace the inline projections (tasks, quota tables, pipeline jobs) with their rebuild from events")
	return cmd
}

// replay compares every projection with its rebuild from events and
// prints what differs; it fails when anything does.
func replay(ctx context.Context, out io.Writer, databaseURL string, p *process, keep, inline bool) error {
	pool, err := pg.Open(ctx, pg.Config{URL: databaseURL, Schema: scheduler.Schema, MaxConns: 8})
	if err != nil {
		return err
	}
	defer pool.Close()
	rebuilt := map[bool]string{true: " (rebuilt)", false: ""}[inline]
	rep, err := scheduler.RebuildInlineProjection(ctx, pool, inline)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "tasks (inline projection): %d tasks from %d events, %d differ%s\n", rep.Tasks, rep.Events, len(rep.Differences), rebuilt)
	equal := len(rep.Differences) == 0
	qrep, found, err := replayQuota(ctx, databaseURL, inline)
	if err != nil {
		return err
	}
	if found {
		fmt.Fprintf(out, "quota (inline projection): %d aggregates from %d events, %d differ%s\n", qrep.Aggregates, qrep.Events,
			len(qrep.Differences), rebuilt)
		equal = equal && len(qrep.Differences) == 0
	}
	prep, found, err := replayPipeline(ctx, databaseURL, inline)
	if err != nil {
		return err
	}
	if found {
		fmt.Fprintf(out, "pipeline jobs (inline projection): %d jobs from %d events, %d differ%s\n", prep.Jobs, prep.Events,
			len(prep.Differences), rebuilt)
		equal = equal && len(prep.Differences) == 0
	}
	for _, spec := range scheduler.ReplaySpecs(p.kafka) {
		spec.Keep = keep
		r, err := projection.Replay(ctx, pool, spec)
		if err != nil {
			return fmt.Errorf("replay %s: %w", spec.Name, err)
		}
		printReplay(out, r)
		equal = equal && r.Equal()
	}
	if !equal {
		return errors.New("replay differs from the live projections")
	}
	fmt.Fprintln(out, "all projections equal their replay")
	return nil
}

// printReplay prints, per table of a Kafka projection, how its replay
// compares with the live rows, with samples of the rows that differ.
func printReplay(out io.Writer, r *projection.Report) {
	for _, t := range r.Tables {
		fmt.Fprintf(out, "%s: %d records replayed in %s; live %d rows, replay %d rows, %d only live, %d only replay\n",
			t.Live, r.Records, r.Duration.Round(time.Millisecond), t.LiveRows, t.ReplayRows, t.OnlyInLive, t.OnlyInReplay)
		for _, s := range t.Samples {
			fmt.Fprintln(out, "   ", s)
		}
	}
}

// replayQuota rebuilds the quota service's inline projection from its
// events and compares it with the live tables; found is false when the
// database has no quota schema.
func replayQuota(ctx context.Context, databaseURL string, apply bool) (quota.RebuildReport, bool, error) {
	pool, err := pg.Open(ctx, pg.Config{URL: databaseURL, Schema: quota.Schema, MaxConns: 2})
	if err != nil {
		return quota.RebuildReport{}, false, err
	}
	defer pool.Close()
	var present bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, quota.Schema+".quotas").Scan(&present); err != nil || !present {
		return quota.RebuildReport{}, false, err
	}
	rep, err := quota.RebuildInlineProjection(ctx, pool, apply)
	return rep, true, err
}

// replayPipeline rebuilds the pipeline's jobs table when its schema
// exists.
func replayPipeline(ctx context.Context, databaseURL string, apply bool) (scheduler.PipelineRebuildReport, bool, error) {
	pool, err := pg.Open(ctx, pg.Config{URL: databaseURL, Schema: scheduler.PipelineSchema, MaxConns: 2})
	if err != nil {
		return scheduler.PipelineRebuildReport{}, false, err
	}
	defer pool.Close()
	var present bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, scheduler.PipelineSchema+".jobs").Scan(&present); err != nil || !present {
		return scheduler.PipelineRebuildReport{}, false, err
	}
	rep, err := scheduler.RebuildPipelineJobs(ctx, pool, apply)
	return rep, true, err
}
