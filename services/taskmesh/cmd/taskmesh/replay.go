package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskmesh/taskmesh/platform/kafka"
	"github.com/taskmesh/taskmesh/platform/pg"
	"github.com/taskmesh/taskmesh/platform/projection"
	"github.com/taskmesh/taskmesh/services/consumers"
	"github.com/taskmesh/taskmesh/services/quota"
	"github.com/taskmesh/taskmesh/services/quota/admission"
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
		Short: "Rebuild every projection from the event log into fresh tables and compare them with the live ones",
		Long: `replay recomputes the inline projections (the scheduler's tasks, the quota service's tables,
the pipeline's jobs) from the event stores, and rebuilds every Kafka projection from offset 0 into fresh
tables — task views, admission workloads, the audit log, usage and webhook deliveries —
comparing each with its live table. Dead letters are not rebuilt. It fails when
anything differs.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.run(cmd, "replay", func(ctx context.Context, p *process) error {
				return replay(ctx, cmd.OutOrStdout(), c.databaseURL, p.kafka, keep, inline)
			})
		},
	}
	c.flags(cmd)
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the replay tables for inspection")
	cmd.Flags().BoolVar(&inline, "rebuild-inline", false, "also replace the inline projections (tasks, quota tables, pipeline jobs) with their rebuild from events")
	return cmd
}

// replaySet is one schema's Kafka projections.
type replaySet struct {
	schema string
	specs  []projection.ReplaySpec
}

func replaySets(k kafka.Config) []replaySet {
	return []replaySet{
		{scheduler.Schema, scheduler.ReplaySpecs(k)},
		{admission.Schema, admission.ReplaySpecs(k)},
		{consumers.Schema, consumers.ReplaySpecs(k)},
	}
}

// replay compares every projection with its rebuild from events and
// prints what differs; it fails when anything does.
func replay(ctx context.Context, out io.Writer, databaseURL string, k kafka.Config, keep, inline bool) error {
	equal, err := replayInline(ctx, out, databaseURL, inline)
	if err != nil {
		return err
	}
	for _, set := range replaySets(k) {
		same, err := replaySchema(ctx, out, databaseURL, set, keep)
		if err != nil {
			return err
		}
		equal = equal && same
	}
	if !equal {
		return errors.New("replay differs from the live projections")
	}
	fmt.Fprintln(out, "all projections equal their replay")
	return nil
}

// replayInline rebuilds the inline projections (the scheduler's tasks,
// the quota service's tables, the pipeline's jobs) from their event stores.
func replayInline(ctx context.Context, out io.Writer, databaseURL string, inline bool) (bool, error) {
	pool, err := pg.Open(ctx, pg.Config{URL: databaseURL, Schema: scheduler.Schema, MaxConns: 4})
	if err != nil {
		return false, err
	}
	defer pool.Close()
	rebuilt := map[bool]string{true: " (rebuilt)", false: ""}[inline]
	rep, err := scheduler.RebuildInlineProjection(ctx, pool, inline)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "tasks (inline projection): %d tasks from %d events, %d differ%s\n", rep.Tasks, rep.Events, len(rep.Differences), rebuilt)
	printFirstDifferences(out, rep.Differences)
	equal := len(rep.Differences) == 0
	qrep, found, err := replayQuota(ctx, databaseURL, inline)
	if err != nil {
		return false, err
	}
	if found {
		fmt.Fprintf(out, "quota (inline projection): %d aggregates from %d events, %d differ%s\n", qrep.Aggregates, qrep.Events,
			len(qrep.Differences), rebuilt)
		printFirstDifferences(out, qrep.Differences)
		equal = equal && len(qrep.Differences) == 0
	}
	prep, found, err := replayPipeline(ctx, databaseURL, inline)
	if err != nil {
		return false, err
	}
	if found {
		fmt.Fprintf(out, "pipeline jobs (inline projection): %d jobs from %d events, %d differ%s\n", prep.Jobs, prep.Events,
			len(prep.Differences), rebuilt)
		printFirstDifferences(out, prep.Differences)
		equal = equal && len(prep.Differences) == 0
	}
	return equal, nil
}

// replaySchema replays one schema's Kafka projections, if the schema
// exists (a deployment may run without a service).
func replaySchema(ctx context.Context, out io.Writer, databaseURL string, set replaySet, keep bool) (bool, error) {
	pool, err := pg.Open(ctx, pg.Config{URL: databaseURL, Schema: set.schema, MaxConns: 4})
	if err != nil {
		return false, err
	}
	defer pool.Close()
	var present bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, set.schema+".projection_offsets").Scan(&present); err != nil || !present {
		return true, err
	}
	equal := true
	for _, spec := range set.specs {
		spec.Keep = keep
		r, err := projection.Replay(ctx, pool, spec)
		if errors.Is(err, projection.ErrNothingApplied) {
			fmt.Fprintf(out, "%s: %v\n", spec.Name, err)
			equal = false
			continue
		}
		if err != nil {
			return false, fmt.Errorf("replay %s: %w", spec.Name, err)
		}
		printReplay(out, spec.Name, r)
		equal = equal && r.Equal()
	}
	return equal, nil
}

// printReplay prints, per table of a Kafka projection, how its replay
// compares with the live rows, with samples of the rows that differ.
func printReplay(out io.Writer, name string, r *projection.Report) {
	for _, t := range r.Tables {
		fmt.Fprintf(out, "%s → %s: %d records replayed in %s (%d skipped as dead letters); live %d rows, replay %d rows, %d only live, %d only replay\n",
			name, t.Live, r.Records, r.Duration.Round(time.Millisecond), r.Skipped, t.LiveRows, t.ReplayRows, t.OnlyInLive, t.OnlyInReplay)
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

// shownDifferences is how many differing aggregates a replay names.
const shownDifferences = 5

// printFirstDifferences names the first aggregates whose rebuilt rows
// differ from the live ones, so that a failed check can be looked into.
func printFirstDifferences(out io.Writer, ids []string) {
	if len(ids) == 0 {
		return
	}
	more := ""
	if len(ids) > shownDifferences {
		more = fmt.Sprintf(" and %d more", len(ids)-shownDifferences)
		ids = ids[:shownDifferences]
	}
	fmt.Fprintf(out, "  differing: %s%s\n", strings.Join(ids, ", "), more)
}
