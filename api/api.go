// Package api is the REST API a replica serves on its HTTP port under
// /api/v1/ (docs/api.md): the whole job's view (package jobview) as JSON,
// read-only, and, only when an operator turned them on and with the bearer
// token, the write actions savepoint, stop and resume. It owns the
// endpoints, their JSON shapes and the admin check; what it shows comes
// from a View (runtime/observe), what it does from Actions (package cli).
//
// Handlers run on net/http's goroutines; the Server's plan cache is
// guarded by its mutex.
package api

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/jobview"
	"github.com/weir-stream/weir/plan"
)

// View is what the API shows: the job's view as the control topics hold it
// (runtime/observe.Observer).
type View interface {
	Job() (jobview.Job, error)
	Figures() (map[control.TaskID]jobview.Figures, error)
	Checkpoints(limit int) ([]jobview.Checkpoint, error)
	Checkpoint(id ckpt.ID) (jobview.Checkpoint, bool, error)
	Generation() (*control.Generation, error)
}

// Local is what only the answering replica knows of itself.
type Local interface {
	// Refused is why this replica refuses to run the job (its job file
	// cannot restore the newest checkpoint), or nil.
	Refused() error
}

// Actions are the write actions, the same as `processor savepoint`,
// `stop` and `resume`; each returns the command's output for people.
type Actions interface {
	Savepoint(ctx context.Context, target string) (string, error)
	Stop(ctx context.Context, savepoint bool, target string) (string, error)
	Resume(ctx context.Context, skip []string) (string, error)
}

// Options configure a Server.
type Options struct {
	View  View
	Local Local // nil: none
	// Plan plans the job for a generation's tasks (plan.ForTasks).
	Plan func(tasks []control.TaskID) (*plan.Plan, error)
	// Admin turns the write actions on (http.admin.enabled); TokenFile
	// holds their bearer token (http.admin.token_file), read at each
	// request so that a rotated Secret takes effect.
	Admin     bool
	TokenFile string
	Actions   Actions
	Logger    *slog.Logger
}

// Server serves the API.
type Server struct {
	opts Options

	mu       sync.Mutex
	planGen  uint64
	planned  *plan.Plan
	planErr  error
	planDone bool
}

// New returns a Server.
func New(opts Options) *Server { return &Server{opts: opts} }

// DefaultLimit is the number of checkpoints /api/v1/checkpoints returns
// without ?limit.
const DefaultLimit = 20

// Register adds the API's routes to mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/job", s.job)
	mux.HandleFunc("GET /api/v1/job/metrics", s.metrics)
	mux.HandleFunc("GET /api/v1/checkpoints", s.checkpoints)
	mux.HandleFunc("GET /api/v1/checkpoints/{id}", s.checkpoint)
	mux.HandleFunc("POST /api/v1/job/savepoint", s.admin("savepoint", s.savepoint))
	mux.HandleFunc("POST /api/v1/job/stop", s.admin("stop", s.stop))
	mux.HandleFunc("POST /api/v1/job/resume", s.admin("resume", s.resume))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/job/savepoint", "/api/v1/job/stop", "/api/v1/job/resume":
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, r.URL.Path+" takes POST")
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path+" (docs/api.md)")
	})
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, Error{Error: msg})
}

// viewError answers an error of the View: 503 while it loads.
func viewError(w http.ResponseWriter, err error) {
	writeError(w, http.StatusServiceUnavailable, err.Error())
}

// JobResponse is the body of GET /api/v1/job.
type JobResponse struct {
	jobview.Job
	// Plan is the generation's plan: stages with their tasks' placement
	// and status, shuffles, sinks; nil before the first generation or
	// when this replica's job file does not plan the generation's tasks
	// (PlanError says why).
	Plan      *Plan  `json:"plan"`
	PlanError string `json:"plan_error,omitempty"`
}

// Plan is the generation's plan.
type Plan struct {
	Stages         []Stage         `json:"stages"`
	Shuffles       []*plan.Shuffle `json:"shuffles"`
	Sinks          []string        `json:"sinks"`
	MaxParallelism int             `json:"max_parallelism"`
}

// Stage is one stage of the plan with its tasks.
type Stage struct {
	plan.Stage
	// SinkTopics are the topics of the stage's sinks.
	SinkTopics []string       `json:"sink_topics,omitempty"`
	Tasks      []jobview.Task `json:"tasks"`
}

func (s *Server) job(w http.ResponseWriter, _ *http.Request) {
	j, err := s.opts.View.Job()
	if err != nil {
		viewError(w, err)
		return
	}
	if s.opts.Local != nil {
		if e := s.opts.Local.Refused(); e != nil {
			j.Refused = e.Error()
			if j.State != jobview.StateFailed && j.State != jobview.StateStopped {
				j.State = jobview.StateRefused
			}
		}
	}
	resp := JobResponse{Job: j}
	p, perr := s.plan(j)
	switch {
	case perr != nil:
		resp.PlanError = perr.Error()
	case p != nil:
		resp.Plan = planOf(p, j.Tasks)
	}
	writeJSON(w, http.StatusOK, resp)
}

// plan returns the plan of j's generation, cached by generation.
func (s *Server) plan(j jobview.Job) (*plan.Plan, error) {
	if j.Generation == 0 || s.opts.Plan == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.planDone && s.planGen == j.Generation {
		return s.planned, s.planErr
	}
	ids := make([]control.TaskID, len(j.Tasks))
	for i, t := range j.Tasks {
		ids[i] = t.ID
	}
	s.planned, s.planErr = s.opts.Plan(ids)
	s.planGen, s.planDone = j.Generation, true
	return s.planned, s.planErr
}

func planOf(p *plan.Plan, tasks []jobview.Task) *Plan {
	out := &Plan{Shuffles: p.Shuffles, Sinks: p.Sinks, MaxParallelism: p.MaxParallelism, Stages: []Stage{}}
	if out.Shuffles == nil {
		out.Shuffles = []*plan.Shuffle{}
	}
	if out.Sinks == nil {
		out.Sinks = []string{}
	}
	for _, st := range p.Stages {
		s := Stage{Stage: st, Tasks: []jobview.Task{}}
		for _, k := range st.Sinks {
			if k >= 0 && k < len(p.Sinks) {
				s.SinkTopics = append(s.SinkTopics, p.Sinks[k])
			}
		}
		for _, t := range tasks {
			if t.Stage == st.Name {
				s.Tasks = append(s.Tasks, t)
			}
		}
		out.Stages = append(out.Stages, s)
	}
	return out
}

// MetricsResponse is the body of GET /api/v1/job/metrics.
type MetricsResponse struct {
	Stages []StageMetrics `json:"stages"`
}

// StageMetrics are a stage's figures: rates and lag summed over its
// tasks, the watermark their minimum, the times per second their maximum
// (the task that holds the stage back), the alignment the longest of its
// tasks in the newest completed checkpoint.
type StageMetrics struct {
	Stage string `json:"stage"`
	Figures
	Tasks []TaskMetrics `json:"tasks"`
}

// Figures are the figures of a task or a stage.
type Figures struct {
	RecordsInPerSecond       float64 `json:"records_in_per_second"`
	RecordsOutPerSecond      float64 `json:"records_out_per_second"`
	LagRecords               int64   `json:"lag_records"`
	WatermarkMS              int64   `json:"watermark_ms"`
	AlignmentMS              int64   `json:"alignment_ms"`
	BusyMSPerSecond          float64 `json:"busy_ms_per_second"`
	BackpressuredMSPerSecond float64 `json:"backpressured_ms_per_second"`
	IdleMSPerSecond          float64 `json:"idle_ms_per_second"`
}

// TaskMetrics are one task's figures, as its replica last reported them
// (ReportedMS 0: no report yet; the figures are then 0).
type TaskMetrics struct {
	Task       control.TaskID `json:"task"`
	Replica    string         `json:"replica"`
	ReportedMS int64          `json:"reported_ms"`
	Figures
}

func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	j, err := s.opts.View.Job()
	if err != nil {
		viewError(w, err)
		return
	}
	figs, err := s.opts.View.Figures()
	if err != nil {
		viewError(w, err)
		return
	}
	align := map[control.TaskID]int64{}
	if c := j.LastCheckpoint; c != nil {
		for _, t := range c.Tasks {
			align[t.Task] = t.Metrics.AlignMS
		}
	}
	resp := MetricsResponse{Stages: []StageMetrics{}}
	for _, t := range j.Tasks {
		f := figs[t.ID]
		tm := TaskMetrics{Task: t.ID, Replica: t.Replica, ReportedMS: f.ReportedMS, Figures: Figures{
			RecordsInPerSecond: f.RecordsInPerSecond, RecordsOutPerSecond: f.RecordsOutPerSecond,
			LagRecords: f.LagRecords, WatermarkMS: f.WatermarkMS, AlignmentMS: align[t.ID],
			BusyMSPerSecond: f.BusyMSPerSecond, BackpressuredMSPerSecond: f.BackpressuredMSPerSecond, IdleMSPerSecond: f.IdleMSPerSecond,
		}}
		i := slices.IndexFunc(resp.Stages, func(s StageMetrics) bool { return s.Stage == t.Stage })
		if i < 0 {
			resp.Stages = append(resp.Stages, StageMetrics{Stage: t.Stage, Figures: Figures{WatermarkMS: tm.WatermarkMS}})
			i = len(resp.Stages) - 1
		}
		st := &resp.Stages[i]
		st.RecordsInPerSecond += tm.RecordsInPerSecond
		st.RecordsOutPerSecond += tm.RecordsOutPerSecond
		st.LagRecords += tm.LagRecords
		st.WatermarkMS = min(st.WatermarkMS, tm.WatermarkMS)
		st.AlignmentMS = max(st.AlignmentMS, tm.AlignmentMS)
		st.BusyMSPerSecond = max(st.BusyMSPerSecond, tm.BusyMSPerSecond)
		st.BackpressuredMSPerSecond = max(st.BackpressuredMSPerSecond, tm.BackpressuredMSPerSecond)
		st.IdleMSPerSecond = max(st.IdleMSPerSecond, tm.IdleMSPerSecond)
		st.Tasks = append(st.Tasks, tm)
	}
	slices.SortFunc(resp.Stages, func(a, b StageMetrics) int { return cmp.Compare(a.Stage, b.Stage) })
	writeJSON(w, http.StatusOK, resp)
}

// CheckpointsResponse is the body of GET /api/v1/checkpoints.
type CheckpointsResponse struct {
	Checkpoints []jobview.Checkpoint `json:"checkpoints"`
}

func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request) {
	limit := DefaultLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a whole number from 1", v))
			return
		}
		limit = n
	}
	cs, err := s.opts.View.Checkpoints(limit)
	if err != nil {
		viewError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, CheckpointsResponse{Checkpoints: cs})
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("checkpoint %q: want a checkpoint ID, a whole number from 1", r.PathValue("id")))
		return
	}
	c, ok, err := s.opts.View.Checkpoint(ckpt.ID(id))
	if err != nil {
		viewError(w, err)
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("checkpoint %d is not in the job's history (never triggered, or older than the history kept)", id))
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// ActionResponse is the body of a write action's answer.
type ActionResponse struct {
	Action string `json:"action"`
	Output string `json:"output"`
}

// admin guards a write action: 403 unless admin actions are on and the
// request carries the token as "Authorization: Bearer <token>". The token
// is never logged, nor echoed.
func (s *Server) admin(action string, h func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.opts.Admin || s.opts.Actions == nil {
			writeError(w, http.StatusForbidden, "write actions are off (http.admin.enabled: false)")
			return
		}
		if err := s.authorize(r); err != nil {
			s.opts.Logger.Warn("write action refused", "action", action, "remote", r.RemoteAddr, "reason", err.Error())
			writeError(w, http.StatusForbidden, "forbidden: "+err.Error())
			return
		}
		s.opts.Logger.Info("write action", "action", action, "remote", r.RemoteAddr)
		h(w, r)
	}
}

// errToken reports a request without the right token; it never says more.
var errToken = errors.New("missing or wrong bearer token (http.admin.token_file)")

func (s *Server) authorize(r *http.Request) error {
	b, err := os.ReadFile(s.opts.TokenFile)
	if err != nil {
		// The file's name only: its content is the secret.
		return fmt.Errorf("the token file %s cannot be read", s.opts.TokenFile)
	}
	want := strings.TrimSpace(string(b))
	if want == "" {
		return fmt.Errorf("the token file %s is empty", s.opts.TokenFile)
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(want)) != 1 {
		return errToken
	}
	return nil
}

// SavepointRequest is the body of POST /api/v1/job/savepoint.
type SavepointRequest struct {
	Target string `json:"target"`
}

// StopRequest is the body of POST /api/v1/job/stop.
type StopRequest struct {
	Savepoint bool   `json:"savepoint"`
	Target    string `json:"target"`
}

// ResumeRequest is the body of POST /api/v1/job/resume.
type ResumeRequest struct {
	Skip []string `json:"skip"`
}

func decodeBody[T any](w http.ResponseWriter, r *http.Request) (T, bool) {
	var v T
	if r.ContentLength == 0 {
		return v, true
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		writeError(w, http.StatusBadRequest, "request body: "+err.Error())
		return v, false
	}
	return v, true
}

func (s *Server) done(w http.ResponseWriter, action, out string, err error) {
	if err != nil {
		writeError(w, http.StatusConflict, action+": "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, ActionResponse{Action: action, Output: out})
}

func (s *Server) savepoint(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeBody[SavepointRequest](w, r)
	if !ok {
		return
	}
	out, err := s.opts.Actions.Savepoint(r.Context(), req.Target)
	s.done(w, "savepoint", out, err)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeBody[StopRequest](w, r)
	if !ok {
		return
	}
	if req.Target != "" && !req.Savepoint {
		writeError(w, http.StatusBadRequest, "target needs savepoint: true")
		return
	}
	out, err := s.opts.Actions.Stop(r.Context(), req.Savepoint, req.Target)
	s.done(w, "stop", out, err)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeBody[ResumeRequest](w, r)
	if !ok {
		return
	}
	out, err := s.opts.Actions.Resume(r.Context(), req.Skip)
	s.done(w, "resume", out, err)
}
