package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weir-stream/weir/api"
	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/format"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/kafkaio/kafkaconn"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/runtime/observe"
	"github.com/weir-stream/weir/runtime/replica"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

func newRunCmd(job *stream.Job) *cobra.Command {
	var file, restoreFrom string
	var prof profileFiles
	cmd := &cobra.Command{
		Use:   "run -c FILE",
		Short: "Run one replica of a job",
		Long: `run starts one replica of the job the configuration describes. Start as many
replicas as you like, anywhere that reaches Kafka and the object store: they
form a group, elect a checkpoint coordinator, share the tasks and take them
over from each other.

Configuration comes from defaults, the YAML file, WEIR_<SECTION>_<KEY>
environment variables and flags named by key path (--checkpoint.interval=1s),
in that order of precedence.

SIGTERM or SIGINT stops the replica: it stops reading, aborts its open
transactions, leaves the group and exits 0 within process.grace_period.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(file, cmd.Flags(), job)
			if err != nil {
				return err
			}
			var restore *checkpoint.Source
			if restoreFrom != "" {
				src, err := checkpoint.ParseSource(restoreFrom)
				if err != nil {
					return err
				}
				restore = &src
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			stopProfiles, err := prof.start()
			if err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			err = errors.Join(serveWith(ctx, cfg, job, cmd.ErrOrStderr(), nil, reg, reg, restore), stopProfiles())
			if err != nil && cfg.Log.Format == "json" {
				// Every line on stderr is then a JSON log line, the
				// reason the replica stopped included.
				newLogger(cfg, cmd.ErrOrStderr()).Error("replica stopped", "err", err)
				return reported{err}
			}
			return err
		},
	}
	addConfigFlags(cmd.Flags(), &file)
	addAllowNonRestoredFlag(cmd.Flags())
	addProfileFlags(cmd.Flags(), &prof)
	cmd.Flags().StringVar(&restoreFrom, "restore-from", "", "start the job from this savepoint or retained checkpoint (the URL processor savepoint prints, a checkpoint's folder <storage>/<job>/chk-<n>, or a savepoint's folder copied anywhere), of this job or another; honoured once: a replica started later with the same value resumes from the job's newest checkpoint (add #2 to restore the same point again)")
	return cmd
}

// addAllowNonRestoredFlag adds --allow-non-restored-state, Flink's name for
// process.allow_non_restored_state (which loadConfig reads from it).
func addAllowNonRestoredFlag(fs *pflag.FlagSet) {
	fs.Bool(allowNonRestoredFlag, false, "restore a checkpoint even if it has state the job no longer has, dropping that state (process.allow_non_restored_state)")
}

const allowNonRestoredFlag = "allow-non-restored-state"

// addConfigFlags adds the flags of every command that loads a job's
// configuration (run, validate, checkpoints, transactions), so that each
// accepts what the others do: -c FILE, and a flag for every scalar
// configuration key, named by its key path.
func addConfigFlags(fs *pflag.FlagSet, file *string) {
	fs.StringVarP(file, "config", "c", "", "the job's YAML configuration file")
	for _, k := range config.Keys() {
		fs.String(k, "", "overrides "+k+" (environment: "+config.EnvName(k)+")")
	}
}

// reported is an error the command has already logged; Run exits 1
// without printing it again.
type reported struct{ err error }

func (r reported) Error() string { return r.err.Error() }
func (r reported) Unwrap() error { return r.err }

// newLogger builds the process logger from the log section. Every
// time.Duration is written as Go's duration string ("1.5s", "250ms"), in
// JSON as in text: slog's JSON handler would write integer nanoseconds,
// which read as a count to a person and to a log pipeline. Every error is
// written as its message (errorString).
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: replaceAttr}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// replaceAttr is the handlers' ReplaceAttr: a duration becomes its string
// form, an error its message.
func replaceAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			return slog.String(a.Key, errorString(err))
		}
	}
	return a
}

// errorString is the one place where an error becomes log text: its
// message, never the verbose form. slog's text handler formats a value
// with %+v, with which gocloud.dev's errors (and any using xerrors'
// formatting) print their stack frames and Go file paths:
// "gocloud.dev/blob.(*ListIterator).Next /root/go/pkg/mod/…/blob.go:609".
func errorString(err error) string { return err.Error() }

// serve runs one replica of job (nil: the configuration's YAML job) and its
// HTTP endpoints until ctx ends. onCommitted, if set, is called for every
// completed checkpoint.
func serve(ctx context.Context, cfg *config.Config, job *stream.Job, logOut io.Writer, onCommitted func(ckpt.ID)) error {
	reg := prometheus.NewRegistry()
	return serveWith(ctx, cfg, job, logOut, onCommitted, reg, reg, nil)
}

// serveWith is serve with the registry /metrics serves (gatherer) and the
// registerer the replica registers its metrics with, normally the same
// registry; a test wraps the registerer to see every metric registered.
// restore is run's --restore-from (nil: none).
func serveWith(ctx context.Context, cfg *config.Config, goJob *stream.Job, logOut io.Writer, onCommitted func(ckpt.ID),
	gatherer prometheus.Gatherer, reg prometheus.Registerer, restore *checkpoint.Source) error {
	log := newLogger(cfg, logOut)
	registries, err := newRegistries(log, reg)
	if err != nil {
		return err
	}
	missing, err := newMissingFields(log, reg)
	if err != nil {
		return err
	}
	job, err := jobWith(cfg, goJob, pipeline.Env{Context: ctx, Registry: registries.get, Missing: missing.counter})
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	fp, err := jobFingerprint(cfg, job)
	if err != nil {
		return err
	}
	rep, err := replica.New(ctx, replica.Options{
		Config: cfg, Job: job, ReplicaID: cfg.Process.ReplicaID, Fingerprint: fp,
		Logger: log, Registerer: reg, OnCommitted: onCommitted, RestoreFrom: restore,
	})
	if err != nil {
		return err
	}

	topics := controltopic.NewTopics(cfg.Kafka.TopicPrefix)
	acks, err := controltopic.NewAckWriter(rep.KafkaOpts(), topics)
	if err != nil {
		return err
	}
	defer acks.Close() // after the reporter stopped (deferred below)
	// The reports and the job's view run beside the replica, until it
	// returns.
	bgCtx, bgCancel := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() {
		bgCancel()
		bg.Wait()
	}()
	reporter := &observe.Reporter{
		Self: rep, Sender: acks, Interval: cfg.HTTP.ReportInterval, Logger: log,
		Figures: &observe.GatheredFigures{Gatherer: gatherer, SourceStage: func() string { return sourceStage(job) }, Logger: log},
	}
	bg.Add(1)
	go func() {
		defer bg.Done()
		reporter.Run(bgCtx)
	}()
	// readiness is the /readyz answer: whether the replica is ready, and
	// why (not).
	readiness := func() (bool, string) {
		if req := rep.PendingRestore(); req != "" && rep.Refused() == nil && (rep.Failure() != nil || rep.Stopped() != nil) {
			// Ready, so that a rolling update that sets restoreFrom on a
			// stopped job goes on to the next pod (docs/deploy.md).
			return true, "waiting: the job is stopped or failed; this replica's --restore-from " + req +
				" starts it when a replica with it holds the coordinator role"
		}
		if f := rep.Failure(); f != nil {
			return false, "not ready: " + f.String() + "; to resume: " + f.Resume()
		}
		if s := rep.Stopped(); s != nil {
			return false, "not ready: " + s.String()
		}
		if e := rep.Refused(); e != nil {
			return false, "not ready: " + e.Error()
		}
		if err := registries.unavailable(); err != nil {
			return false, "not ready: " + err.Error() + " (retrying)"
		}
		if !rep.Ready() {
			return false, "not ready: tasks not running (starting, restoring, or waiting for Kafka, the object store or a full local state disk)"
		}
		if msg := rep.Waiting(); msg != "" {
			// Ready: this replica's file is not the one running, and
			// it takes its share once it is (a rolling update).
			return true, msg
		}
		return true, "ready"
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "weir", Subsystem: "replica", Name: "ready",
		Help: "1 while the replica is ready (/readyz answers 200): it runs every task it was assigned, or waits to take its share under a rolling update; 0 while it is starting, restoring, refused, or the job is failed or stopped.",
	}, func() float64 {
		if ready, _ := readiness(); ready {
			return 1
		}
		return 0
	})); err != nil {
		return err
	}

	var srv *http.Server
	if cfg.HTTP.Address != "" {
		mux := http.NewServeMux()
		obs := observe.New(observe.Options{
			Kafka: rep.KafkaOpts(), Topics: topics, Job: cfg.Job.Name,
			ReportTTL: 3*cfg.HTTP.ReportInterval + 2*time.Second, Logger: log,
		})
		bg.Add(1)
		go func() {
			defer bg.Done()
			store, err := objstore.Open(bgCtx, cfg.Checkpoint.Storage, cfg.Job.Name, objstore.Options{Logger: log})
			if err != nil {
				log.Warn("the REST API shows no checkpoint figures read from _metadata: the checkpoint storage does not open", "err", err)
			} else {
				defer store.Close()
				obs.SetStore(store)
			}
			_ = obs.Run(bgCtx)
		}()
		api.New(api.Options{
			View: obs, Local: refusal{rep}, Plan: generationPlan(cfg, job),
			Admin: cfg.HTTP.Admin.Enabled, TokenFile: cfg.HTTP.Admin.TokenFile,
			Actions: adminActions{cfg: cfg, goJob: goJob, opts: rep.KafkaOpts()}, Logger: log,
		}).Register(mux)
		mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{Registry: reg}))
		if cfg.HTTP.Pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/livez", livez(rep.Heartbeat(), cfg.Process.LivenessTimeout))
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			ready, msg := readiness()
			if !ready {
				http.Error(w, msg, http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, msg)
		})
		ln, err := net.Listen("tcp", cfg.HTTP.Address)
		if err != nil {
			return fmt.Errorf("http.address %s: %w", cfg.HTTP.Address, err)
		}
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server", "err", err)
			}
		}()
		log.Info("serving /metrics, /healthz, /livez, /readyz and /api/v1/", "address", ln.Addr().String(), "admin_actions", cfg.HTTP.Admin.Enabled)
	}

	log.Info("replica starting", "job", cfg.Job.Name, "replica_id", cfg.Process.ReplicaID, "fingerprint", fp,
		"brokers", strings.Join(cfg.Kafka.Brokers, ","), "kafka_security", kafkaconn.Describe(cfg.Kafka), "storage", cfg.Checkpoint.Storage)
	// The job's start work (a sink's schema registered, say) fails the
	// process here, before any task runs, not at the first record.
	if err := job.Start(ctx); err != nil {
		if srv != nil {
			_ = srv.Close()
		}
		return fmt.Errorf("job %s does not start: %w", cfg.Job.Name, err)
	}
	runErr := rep.Run(ctx)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	if runErr != nil {
		return runErr
	}
	log.Info("replica stopped")
	return nil
}

// livez answers the liveness probe: 503 once the replica's main loop has
// made no progress for longer than timeout (process.liveness_timeout), so
// that a stuck replica is restarted; waits for Kafka or the object store
// and restores do not count (replica.Heartbeat).
func livez(h *replica.Heartbeat, timeout time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if d := h.Stalled(time.Now()); d > timeout {
			http.Error(w, fmt.Sprintf("stalled: the replica's main loop has made no progress for %v (process.liveness_timeout %v)",
				d.Round(time.Second), timeout), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// registries are a process's schema-registry clients, one per URL, shared
// by the job's formats, with their metrics.
type registries struct {
	log     *slog.Logger
	metrics *format.Metrics

	mu    sync.Mutex
	byURL map[string]*format.Registry
}

func newRegistries(log *slog.Logger, reg prometheus.Registerer) (*registries, error) {
	m, err := format.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &registries{log: log, metrics: m, byURL: map[string]*format.Registry{}}, nil
}

func (r *registries) get(f config.Format) (*format.Registry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.byURL[f.Registry]; c != nil {
		return c, nil
	}
	c, err := format.NewRegistry(format.RegistryConfig{
		URL: f.Registry, Username: f.RegistryUsername, Password: f.RegistryPassword,
		Log: r.log.With("component", "schema-registry"), Metrics: r.metrics,
	})
	if err != nil {
		return nil, err
	}
	r.byURL[f.Registry] = c
	return c, nil
}

// unavailable returns the error of a registry being retried, or nil.
func (r *registries) unavailable() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.byURL {
		if err := c.Unavailable(); err != nil {
			return err
		}
	}
	return nil
}
