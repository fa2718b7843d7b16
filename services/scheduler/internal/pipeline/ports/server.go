// Package ports serves taskmesh.pipeline.v1.PipelineService over gRPC: the
// request ↔ domain mapping, the upload stream, and the one place where the
// pipeline's errors become gRPC statuses (the gateway turns those into the
// pipeline's error body, docs/api/pipeline.md).
package ports

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pipelinev1 "github.com/taskmesh/taskmesh/gen/taskmesh/pipeline/v1"
	"github.com/taskmesh/taskmesh/platform/grpcserver"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/app"
	"github.com/taskmesh/taskmesh/services/scheduler/internal/pipeline/domain"
	schedports "github.com/taskmesh/taskmesh/services/scheduler/internal/ports"
)

// Server serves pipelinev1.PipelineService.
type Server struct {
	pipelinev1.UnimplementedPipelineServiceServer
	App *app.App
	Log *slog.Logger
}

func (s *Server) CreateJob(ctx context.Context, r *pipelinev1.CreateJobRequest) (*pipelinev1.CreateJobResponse, error) {
	c, err := schedports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	j, err := s.App.CreateJob(ctx, c, domain.JobRequest{ModelKey: r.GetModelKey(), QuantKey: r.GetQuantKey(),
		RefImageKeys: r.GetRefImageKeys()})
	if err != nil {
		return nil, s.status(err)
	}
	return &pipelinev1.CreateJobResponse{JobId: j.ID, Status: string(j.Status)}, nil
}

func (s *Server) GetJob(ctx context.Context, r *pipelinev1.GetJobRequest) (*pipelinev1.GetJobResponse, error) {
	c, err := schedports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	j, err := s.App.GetJob(ctx, c, r.GetJobId())
	if err != nil {
		return nil, s.status(err)
	}
	out := JobToProto(j)
	bie, nef, err := s.App.OutputLinks(ctx, j)
	if err != nil {
		return nil, s.status(err)
	}
	out.Output.BieUrl, out.Output.NefUrl = link(bie), link(nef)
	return &pipelinev1.GetJobResponse{Job: out}, nil
}

// link is a signed link as the API shows it: null when there is none.
func link(u string) *wrapperspb.StringValue {
	if u == "" {
		return nil
	}
	return wrapperspb.String(u)
}

// JobToProto shows a job as GET /jobs/{job_id} documents it.
func JobToProto(j domain.Job) *pipelinev1.Job {
	out := &pipelinev1.Job{JobId: j.ID, Status: string(j.Status), Stage: string(j.Stage.Status()), Progress: int32(j.Progress),
		CreatedAt: timestamppb.New(j.CreatedAt), UpdatedAt: timestamppb.New(j.UpdatedAt), Version: j.Version,
		Output: &pipelinev1.JobOutput{}}
	if k := j.Output(domain.StageBIE); k != "" {
		out.Output.BieKey = wrapperspb.String(k)
	}
	if k := j.Output(domain.StageNEF); k != "" {
		out.Output.NefKey = wrapperspb.String(k)
	}
	if j.Error != nil {
		out.Error = &pipelinev1.JobError{Step: string(j.Error.Step), Reason: j.Error.Reason}
	}
	if len(j.StageTasks) > 0 {
		out.StageTasks = map[string]string{}
		for s, id := range j.StageTasks {
			out.StageTasks[string(s)] = id
		}
	}
	return out
}

func (s *Server) GetJobDownloads(ctx context.Context, r *pipelinev1.GetJobDownloadsRequest) (*pipelinev1.GetJobDownloadsResponse, error) {
	c, err := schedports.UserCaller(ctx)
	if err != nil {
		return nil, err
	}
	l, err := s.App.Downloads(ctx, c, r.GetJobId())
	if err != nil {
		return nil, s.status(err)
	}
	return &pipelinev1.GetJobDownloadsResponse{JobId: l.JobID, ExpiresIn: int32(l.TTL.Seconds()),
		BieUrl: link(l.BIE), NefUrl: link(l.NEF), Logs: &pipelinev1.JobLogLinks{
			Onnx: link(l.Logs[domain.StageONNX]), Bie: link(l.Logs[domain.StageBIE]), Nef: link(l.Logs[domain.StageNEF])}}, nil
}

// UploadJobInput reads the header, then hands the chunks to the use case
// as one stream: the file is stored as it arrives.
func (s *Server) UploadJobInput(stream pipelinev1.PipelineService_UploadJobInputServer) error {
	ctx := stream.Context()
	c, err := schedports.UserCaller(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return s.status(domain.Invalid("header", "the upload sent nothing"))
		}
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return s.status(domain.Invalid("header", "the first message of an upload must be its header"))
	}
	u, err := s.App.Upload(ctx, c, h.GetKind(), h.GetFilename(), &chunkReader{stream: stream})
	if err != nil {
		return s.status(err)
	}
	return stream.SendAndClose(&pipelinev1.UploadJobInputResponse{Key: u.Key, Kind: string(u.Kind), Size: u.Size})
}

// chunkReader reads the chunks of an upload stream.
type chunkReader struct {
	stream pipelinev1.PipelineService_UploadJobInputServer
	buf    []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		m, err := r.stream.Recv()
		if err != nil {
			return 0, err
		}
		if m.GetHeader() != nil {
			return 0, domain.Invalid("header", "an upload has one header, before its chunks")
		}
		r.buf = m.GetChunk()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Codes of the pipeline API's error body, carried as the ErrorInfo
// metadata "pipeline_code" (docs/api/pipeline.md, "Errors").
const (
	CodeJobNotFound      = "JOB_NOT_FOUND"
	CodeInvalidParameter = "InvalidParameter"
	CodeRequestTooLarge  = "RequestTooLarge"
	CodeAccessDenied     = "AccessDenied"
)

// status maps an error of the pipeline's use cases to a gRPC status: the
// only place that does.
func (s *Server) status(err error) error {
	var invalid *domain.InvalidError
	switch {
	case errors.As(err, &invalid):
		return withCode(codes.InvalidArgument, CodeInvalidParameter, err.Error(),
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: invalid.Field, Description: invalid.Reason}}})
	case errors.Is(err, domain.ErrNotFound):
		return withCode(codes.NotFound, CodeJobNotFound, "job not found", nil)
	case errors.Is(err, app.ErrTooLarge):
		return withCode(codes.ResourceExhausted, CodeRequestTooLarge, err.Error(), nil)
	case errors.Is(err, app.ErrNoTenant):
		return withCode(codes.PermissionDenied, CodeAccessDenied, err.Error(), nil)
	}
	return schedports.ToStatus(s.Log, err)
}

func withCode(c codes.Code, code, msg string, bad *errdetails.BadRequest) error {
	st := status.New(c, msg)
	info := &errdetails.ErrorInfo{Domain: grpcserver.ErrorDomain, Reason: code, Metadata: map[string]string{"pipeline_code": code}}
	var err error
	if bad != nil {
		st, err = st.WithDetails(info, bad)
	} else {
		st, err = st.WithDetails(info)
	}
	if err != nil {
		return status.Error(c, msg)
	}
	return st.Err()
}
