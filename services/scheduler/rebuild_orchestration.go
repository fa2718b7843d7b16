package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/taskmesh/taskmesh/platform/eventstore"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/codec"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/adapters/postgres"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
)

// rebuildOrchestration folds every task-group and template event from
// the event store, compares the result with the live task_groups,
// task_group_members and templates rows (as the documents the stores
// write), and with apply replaces those rows.
func rebuildOrchestration(ctx context.Context, tx pgx.Tx, rep *RebuildReport, apply bool) error {
	groups, groupOrder, err := foldGroups(ctx, tx, rep)
	if err != nil {
		return err
	}
	templates, templateOrder, err := foldTemplates(ctx, tx, rep)
	if err != nil {
		return err
	}
	rep.Groups, rep.Templates = len(groupOrder), len(templateOrder)
	live, err := liveDocs(ctx, tx)
	if err != nil {
		return err
	}
	want := map[string]string{}
	for _, id := range groupOrder {
		maps.Copy(want, groupDocs(groups[id]))
	}
	for _, id := range templateOrder {
		doc, _ := json.Marshal(templates[id])
		want[id] = string(doc)
	}
	rep.Differences = append(rep.Differences, differing(live, want, groupOrder, templateOrder)...)
	if !apply {
		return nil
	}
	return replaceOrchestration(ctx, tx, groups, groupOrder, templates, templateOrder)
}

// foldGroups folds the task-group events, by group in order of creation.
func foldGroups(ctx context.Context, tx pgx.Tx, rep *RebuildReport) (map[string]*orch.State, []string, error) {
	groups := map[string]*orch.State{}
	var order []string
	err := eventstore.New().Rebuild(ctx, tx, postgres.GroupAggregateType, 2000, func(ctx context.Context, page []eventstore.Event) error {
		for _, e := range page {
			_, r, err := codec.UnmarshalOrchestration(e.Payload)
			if err != nil {
				return fmt.Errorf("event %d: %w", e.ID, err)
			}
			s, seen := groups[e.AggregateID]
			if !seen {
				s = &orch.State{Members: map[string]orch.Member{}}
				groups[e.AggregateID] = s
				order = append(order, e.AggregateID)
			}
			if !s.Apply(r) {
				return fmt.Errorf("event %d: no case for %s", e.ID, r.Event.EventName())
			}
			rep.Events++
		}
		return nil
	})
	return groups, order, err
}

// foldTemplates folds the template events, by aggregate in order of
// creation.
func foldTemplates(ctx context.Context, tx pgx.Tx, rep *RebuildReport) (map[string]orch.Template, []string, error) {
	templates := map[string]orch.Template{}
	var order []string
	err := eventstore.New().Rebuild(ctx, tx, postgres.TemplateAggregateType, 2000, func(ctx context.Context, page []eventstore.Event) error {
		for _, e := range page {
			env, r, err := codec.UnmarshalOrchestration(e.Payload)
			if err != nil {
				return fmt.Errorf("event %d: %w", e.ID, err)
			}
			t, seen := templates[e.AggregateID]
			if !seen {
				order = append(order, e.AggregateID)
			}
			next, ok := orch.ApplyTemplate(t, r)
			if !ok {
				return fmt.Errorf("event %d: no case for %s", e.ID, r.Event.EventName())
			}
			next.TenantID = env.GetTenantId()
			templates[e.AggregateID] = next
			rep.Events++
		}
		return nil
	})
	return templates, order, err
}

// differing names the aggregates whose live documents differ from the
// rebuilt ones: "task_group/<id>" and template aggregate ids in order of
// creation, then rows no event explains.
func differing(live, want map[string]string, groupOrder, templateOrder []string) []string {
	differ := map[string]bool{}
	for k, v := range want {
		if live[k] != v {
			differ[aggregateOf(k)] = true
		}
	}
	for k := range live {
		if _, ok := want[k]; !ok {
			differ[aggregateOf(k)] = true
		}
	}
	var out []string
	for _, id := range groupOrder {
		if differ[id] {
			out = append(out, "task_group/"+id)
			delete(differ, id)
		}
	}
	for _, id := range templateOrder {
		if differ[id] {
			out = append(out, id)
			delete(differ, id)
		}
	}
	return append(out, slices.Sorted(maps.Keys(differ))...)
}

// groupDocs are the documents of a group's rows: "<group id>" for the
// group row, "<group id>\x1f<member id>" for each member row (none once
// the group is deleted).
func groupDocs(s *orch.State) map[string]string {
	out := map[string]string{}
	doc, _ := json.Marshal(s.Group)
	out[s.Group.ID] = string(doc)
	if s.Group.Deleted {
		return out
	}
	for k, m := range s.Members {
		doc, _ := json.Marshal(m)
		out[s.Group.ID+"\x1f"+k] = string(doc)
	}
	return out
}

func aggregateOf(key string) string {
	for i := range len(key) {
		if key[i] == 0x1f {
			return key[:i]
		}
	}
	return key
}

// liveDocs reads the live rows' documents, keyed as groupDocs and by
// template aggregate id.
func liveDocs(ctx context.Context, tx pgx.Tx) (map[string]string, error) {
	out := map[string]string{}
	rows, err := tx.Query(ctx, `SELECT id, doc::text FROM task_groups
		UNION ALL SELECT group_id || chr(31) || key, doc::text FROM task_group_members
		UNION ALL SELECT 'template/' || tenant_id || '/' || id, doc::text FROM templates`)
	if err != nil {
		return nil, fmt.Errorf("read orchestration rows: %w", err)
	}
	var k, v string
	_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil })
	return out, err
}

// replaceOrchestration replaces the live rows with the rebuilt ones.
func replaceOrchestration(ctx context.Context, tx pgx.Tx, groups map[string]*orch.State, groupOrder []string,
	templates map[string]orch.Template, templateOrder []string) error {
	if _, err := tx.Exec(ctx, `TRUNCATE task_groups, task_group_members, templates`); err != nil {
		return err
	}
	for _, id := range groupOrder {
		if err := postgres.WriteGroupRows(ctx, tx, *groups[id]); err != nil {
			return err
		}
	}
	ts := make([]orch.Template, 0, len(templateOrder))
	for _, id := range templateOrder {
		ts = append(ts, templates[id])
	}
	return postgres.WriteTemplateRows(ctx, tx, ts...)
}
