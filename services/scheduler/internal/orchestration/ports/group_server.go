package ports

import (
	"context"
	"log/slog"
	"time"

	taskv1 "github.com/taskmesh/taskmesh/gen/taskmesh/task/v1"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/app"
	task "github.com/taskmesh/taskmesh/services/scheduler/internal/domain"
	oapp "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/app"
	orch "github.com/taskmesh/taskmesh/services/scheduler/internal/orchestration/domain"
	sports "github.com/taskmesh/taskmesh/services/scheduler/internal/ports"
)

// GroupServer serves taskv1.TaskGroupService.
type GroupServer struct {
	taskv1.UnimplementedTaskGroupServiceServer
	App *oapp.App
	// Tasks reads the members' tasks, which every answer shows with its
	// member (a group's tasks are tasks); nil shows the summaries alone.
	Tasks MemberTasks
	Log   *slog.Logger
}

// MemberTasks reads the caller's tasks by id (the scheduler's app).
type MemberTasks interface {
	TasksByID(ctx context.Context, c app.Caller, ids []string) (map[string]task.Task, error)
}

// toProto shows the group with members, each with its task as it is now.
func (s *GroupServer) toProto(ctx context.Context, c app.Caller, g orch.Group, members []orch.Member) (*taskv1.TaskGroup, error) {
	var tasks map[string]task.Task
	if s.Tasks != nil && len(members) > 0 {
		ids := make([]string, 0, len(members))
		for _, m := range members {
			if m.Released() {
				ids = append(ids, m.TaskID)
			}
		}
		var err error
		if tasks, err = s.Tasks.TasksByID(ctx, c, ids); err != nil {
			return nil, toStatus(s.Log, err)
		}
	}
	return groupToProto(g, members, tasks), nil
}

func (s *GroupServer) CreateTaskGroup(ctx context.Context, r *taskv1.CreateTaskGroupRequest) (*taskv1.CreateTaskGroupResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.App.CreateGroup(ctx, c, groupRequest(r))
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "task group"))
	}
	g, err := s.toProto(ctx, c, st.Group, st.Ordered())
	if err != nil {
		return nil, err
	}
	return &taskv1.CreateTaskGroupResponse{Group: g}, nil
}

func (s *GroupServer) ListTaskGroups(ctx context.Context, r *taskv1.ListTaskGroupsRequest) (*taskv1.ListTaskGroupsResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	f := oapp.GroupFilter{Status: r.GetStatus(), Mode: r.GetMode(),
		PageSize: int(r.GetPageSize()), PageToken: r.GetPageToken(), Offset: int(r.GetOffset())}
	if r.GetPage() > 0 {
		if f.Offset, err = sports.PageStart(int(r.GetPage()), f.PageSize, "task groups"); err != nil {
			return nil, toStatus(s.Log, err)
		}
	}
	groups, next, err := s.App.ListGroups(ctx, c, f)
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "task group"))
	}
	resp := &taskv1.ListTaskGroupsResponse{NextPageToken: next, Groups: make([]*taskv1.TaskGroup, 0, len(groups))}
	for _, g := range groups {
		resp.Groups = append(resp.Groups, groupToProto(g, nil, nil))
	}
	return resp, nil
}

func (s *GroupServer) GetTaskGroup(ctx context.Context, r *taskv1.GetTaskGroupRequest) (*taskv1.GetTaskGroupResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.App.GetGroup(ctx, c, r.GetId())
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "task group"))
	}
	g, err := s.toProto(ctx, c, st.Group, st.Ordered())
	if err != nil {
		return nil, err
	}
	return &taskv1.GetTaskGroupResponse{Group: g}, nil
}

func (s *GroupServer) StartTaskGroup(ctx context.Context, r *taskv1.StartTaskGroupRequest) (*taskv1.StartTaskGroupResponse, error) {
	g, err := s.change(ctx, r.GetId(), func(a *oapp.App, ctx context.Context, id string) error {
		c, err := sports.UserCaller(ctx)
		if err != nil {
			return err
		}
		_, err = a.StartGroup(ctx, c, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &taskv1.StartTaskGroupResponse{Group: g}, nil
}

func (s *GroupServer) CancelTaskGroup(ctx context.Context, r *taskv1.CancelTaskGroupRequest) (*taskv1.CancelTaskGroupResponse, error) {
	g, err := s.change(ctx, r.GetId(), func(a *oapp.App, ctx context.Context, id string) error {
		c, err := sports.UserCaller(ctx)
		if err != nil {
			return err
		}
		_, err = a.CancelGroup(ctx, c, id, r.GetReason())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &taskv1.CancelTaskGroupResponse{Group: g}, nil
}

func (s *GroupServer) ResetTaskGroupRepeat(ctx context.Context, r *taskv1.ResetTaskGroupRepeatRequest) (*taskv1.ResetTaskGroupRepeatResponse, error) {
	// The request's validation has made sure that id and group_id, when
	// both are given, agree (docs/api/task-groups.md).
	id := r.GetId()
	if id == "" {
		id = r.GetGroupId()
	}
	g, err := s.change(ctx, id, func(a *oapp.App, ctx context.Context, id string) error {
		c, err := sports.UserCaller(ctx)
		if err != nil {
			return err
		}
		_, err = a.ResetRepeat(ctx, c, id, r.GetReason())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &taskv1.ResetTaskGroupRepeatResponse{Group: g}, nil
}

// change runs a group command, then answers with the group and every
// member as they are after it.
func (s *GroupServer) change(ctx context.Context, id string, do func(a *oapp.App, ctx context.Context, id string) error) (*taskv1.TaskGroup, error) {
	if err := do(s.App, ctx, id); err != nil {
		return nil, toStatus(s.Log, notFound(err, "task group")) // a status passes through unchanged
	}
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	st, err := s.App.GetGroup(ctx, c, id)
	if err != nil {
		return nil, toStatus(s.Log, notFound(err, "task group"))
	}
	return s.toProto(ctx, c, st.Group, st.Ordered())
}

func (s *GroupServer) DeleteTaskGroup(ctx context.Context, r *taskv1.DeleteTaskGroupRequest) (*taskv1.DeleteTaskGroupResponse, error) {
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.App.DeleteGroup(ctx, c, r.GetId()); err != nil {
		return nil, toStatus(s.Log, notFound(err, "task group"))
	}
	return &taskv1.DeleteTaskGroupResponse{Id: r.GetId(), Deleted: true}, nil
}

// WatchTaskGroup streams the group at once (every member) and after every
// change (the members that changed) until it is final and every member
// has ended. Changes made by this replica arrive at once; others' are
// picked up by a once-a-second re-read.
func (s *GroupServer) WatchTaskGroup(r *taskv1.WatchTaskGroupRequest, stream taskv1.TaskGroupService_WatchTaskGroupServer) error {
	ctx := stream.Context()
	c, err := sports.UserCaller(ctx)
	if err != nil {
		return err
	}
	changes, cancel := s.App.Watch(r.GetId())
	defer cancel()
	st, err := s.App.GetGroup(ctx, c, r.GetId())
	if err != nil {
		return toStatus(s.Log, notFound(err, "task group"))
	}
	g, err := s.toProto(ctx, c, st.Group, st.Ordered())
	if err != nil {
		return err
	}
	if err := stream.Send(&taskv1.WatchTaskGroupResponse{Group: g}); err != nil {
		return err
	}
	for {
		// Only what changed since the last message: a repeat may have ten
		// thousand members, its watchers must not read them all each time.
		if st.Group.Status.Final() && st.Group.Open() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-time.After(time.Second):
		}
		next, err := s.App.GroupChanges(ctx, c, r.GetId(), st.Group.Version)
		if err != nil {
			return toStatus(s.Log, notFound(err, "task group"))
		}
		if next.Group.Version == st.Group.Version {
			continue
		}
		st = next
		g, err := s.toProto(ctx, c, st.Group, st.Ordered())
		if err != nil {
			return err
		}
		if err := stream.Send(&taskv1.WatchTaskGroupResponse{Group: g}); err != nil {
			return err
		}
	}
}
