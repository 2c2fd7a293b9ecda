package format

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/hamba/avro/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/sr"
)

// ErrUnknownSchema is the error of a record whose schema ID the registry
// does not hold: the record's fault, not the registry's.
var ErrUnknownSchema = errors.New("format: schema ID not in the registry")

// ErrBadWireFormat is the error of a value that is not in the Confluent
// wire format (no zero magic byte and 4-byte schema ID).
var ErrBadWireFormat = errors.New("format: not in the Confluent wire format (magic byte 0, 4-byte schema ID)")

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// URL is the registry's Confluent-compatible API base, for example
	// http://registry:8081 (Confluent, Karapace) or
	// http://registry:8080/apis/ccompat/v7 (Apicurio).
	URL string
	// Username and Password, if set, are sent as HTTP basic auth.
	Username, Password string
	// Timeout bounds one HTTP request (default 10s).
	Timeout time.Duration
	// MaxBackoff bounds the wait between retries of an unreachable
	// registry (default 10s).
	MaxBackoff time.Duration
	Log        *slog.Logger
	// Metrics are the process's registry metrics (NewMetrics); nil: none
	// registered.
	Metrics *Metrics
}

// Metrics are the schema-registry metrics of a process, by registry URL:
// registered once, whether or not a job uses a registry, so that the
// metrics exist (without series) before one does.
type Metrics struct {
	requests *prometheus.CounterVec // by registry, outcome
	up       *prometheus.GaugeVec   // by registry
}

// NewMetrics makes the registry metrics and registers them with reg (nil:
// not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_schema_registry_requests_total",
			Help: "Requests to the schema registry, by outcome: ok, not_found (the record's or the job's fault), rejected (another 4xx), unavailable (retried).",
		}, []string{"registry", "outcome"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_schema_registry_up",
			Help: "1 while the schema registry answers, 0 while requests to it fail and are retried.",
		}, []string{"registry"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.up} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Registry is a schema-registry client with a cache of parsed schemas by
// ID. It is safe for concurrent use: the tasks of a process share one.
type Registry struct {
	cl         *sr.Client
	url        string
	log        *slog.Logger
	maxBackoff time.Duration

	mu     sync.Mutex
	parsed map[int]any // avro.Schema or protoreflect.FileDescriptor, by ID; read through byID

	// byID is a copy-on-write snapshot of parsed for the per-record lookup
	// (no lock on the hot path).
	byID atomic.Pointer[map[int]any]

	// down is the last error of a registry that could not be reached, nil
	// once a request succeeds again (Unavailable).
	down atomic.Pointer[error]

	requests *prometheus.CounterVec // by outcome
	up       prometheus.Gauge
}

// NewRegistry returns a client of cfg.URL. It makes no request.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	if cfg.URL == "" {
		return nil, errors.New("format: the schema registry's URL is required")
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.URL), sr.HTTPClient(&http.Client{Timeout: timeout}), sr.UserAgent("weir")}
	if cfg.Username != "" || cfg.Password != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("format: schema registry %s: %w", cfg.URL, err)
	}
	r := &Registry{cl: cl, url: cfg.URL, log: cfg.Log, maxBackoff: cfg.MaxBackoff, parsed: make(map[int]any)}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.maxBackoff <= 0 {
		r.maxBackoff = 10 * time.Second
	}
	empty := map[int]any{}
	r.byID.Store(&empty)
	m := cfg.Metrics
	if m == nil {
		m, _ = NewMetrics(nil) // cannot fail without a registerer
	}
	r.requests = m.requests.MustCurryWith(prometheus.Labels{"registry": cfg.URL})
	r.up = m.up.WithLabelValues(cfg.URL)
	r.up.Set(1)
	return r, nil
}

// URL returns the registry's URL.
func (r *Registry) URL() string { return r.url }

// Client returns the franz-go client, for what this package does not wrap.
func (r *Registry) Client() *sr.Client { return r.cl }

// Unavailable returns the last error of a registry that cannot be reached
// while requests to it are being retried, and nil while it answers.
func (r *Registry) Unavailable() error {
	if e := r.down.Load(); e != nil {
		return *e
	}
	return nil
}

// permanent reports whether err is an answer of the registry that a retry
// would not change (a 4xx), rather than an outage.
func permanent(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode >= 400 && re.StatusCode < 500
}

func notFound(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}

// do runs req until it succeeds, fails permanently, or ctx ends, retrying
// an unreachable registry with exponential backoff and jitter.
func do[T any](ctx context.Context, r *Registry, what string, req func(context.Context) (T, error)) (T, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, r.maxBackoff
	op := func() (T, error) {
		v, err := req(ctx)
		switch {
		case err == nil:
			r.requests.WithLabelValues("ok").Inc()
			if r.down.Swap(nil) != nil {
				r.up.Set(1)
				r.log.Info("schema registry reachable again", "registry", r.url)
			}
			return v, nil
		case permanent(err):
			if notFound(err) {
				r.requests.WithLabelValues("not_found").Inc()
			} else {
				r.requests.WithLabelValues("rejected").Inc()
			}
			return v, backoff.Permanent(err)
		case ctx.Err() != nil:
			return v, backoff.Permanent(ctx.Err())
		}
		r.requests.WithLabelValues("unavailable").Inc()
		e := fmt.Errorf("schema registry %s: %s: %w", r.url, what, err)
		if r.down.Swap(&e) == nil {
			r.up.Set(0)
			r.log.Warn("schema registry unreachable; retrying", "registry", r.url, "request", what, "error", err)
		}
		return v, err
	}
	return backoff.Retry(ctx, op, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
}

// Avro returns the parsed Avro schema of id, from the cache or the
// registry (with its references). An ID the registry does not hold is
// ErrUnknownSchema; an unreachable registry is retried until ctx ends.
func (r *Registry) Avro(ctx context.Context, id int) (avro.Schema, error) {
	s, err := r.schema(ctx, id, sr.TypeAvro, func(sch sr.Schema) (any, error) { return r.parseAvro(ctx, sch, 0) })
	if err != nil {
		return nil, err
	}
	return s.(avro.Schema), nil
}

// schema returns the parsed schema of id, of type want, from the cache or
// the registry, parsed by parse.
func (r *Registry) schema(ctx context.Context, id int, want sr.SchemaType, parse func(sr.Schema) (any, error)) (any, error) {
	if s, ok := (*r.byID.Load())[id]; ok {
		return s, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.parsed[id]; ok {
		return s, nil
	}
	sch, err := do(ctx, r, fmt.Sprintf("schema %d", id), func(ctx context.Context) (sr.Schema, error) { return r.cl.SchemaByID(ctx, id) })
	if err != nil {
		if notFound(err) {
			return nil, fmt.Errorf("%w: %d", ErrUnknownSchema, id)
		}
		return nil, err
	}
	if sch.Type != want {
		return nil, fmt.Errorf("format: schema %d is %s, not %s", id, sch.Type, want)
	}
	s, err := parse(sch)
	if err != nil {
		return nil, fmt.Errorf("format: schema %d: %w", id, err)
	}
	r.parsed[id] = s
	next := make(map[int]any, len(r.parsed))
	for k, v := range r.parsed {
		next[k] = v
	}
	r.byID.Store(&next)
	return s, nil
}

// parseAvro parses sch after its references (fetched by subject and
// version), all into one cache, so that the schema can name their types.
func (r *Registry) parseAvro(ctx context.Context, sch sr.Schema, depth int) (avro.Schema, error) {
	cache := &avro.SchemaCache{}
	if err := r.addReferences(ctx, sch.References, cache, depth); err != nil {
		return nil, err
	}
	return avro.ParseWithCache(sch.Schema, "", cache)
}

func (r *Registry) addReferences(ctx context.Context, refs []sr.SchemaReference, cache *avro.SchemaCache, depth int) error {
	if depth > 16 {
		return errors.New("references nested more than 16 deep")
	}
	for _, ref := range refs {
		ss, err := do(ctx, r, fmt.Sprintf("reference %s version %d", ref.Subject, ref.Version), func(ctx context.Context) (sr.SubjectSchema, error) {
			return r.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		})
		if err != nil {
			return fmt.Errorf("reference %q (%s version %d): %w", ref.Name, ref.Subject, ref.Version, err)
		}
		if err := r.addReferences(ctx, ss.References, cache, depth+1); err != nil {
			return err
		}
		if _, err := avro.ParseWithCache(ss.Schema.Schema, "", cache); err != nil {
			return fmt.Errorf("reference %q: %w", ref.Name, err)
		}
	}
	return nil
}

// Register registers s under subject, after checking it against the
// subject's compatibility setting, and returns its ID. A schema the
// registry rejects as incompatible is an error with the registry's
// reasons. Registering a schema the subject already holds returns its
// existing ID.
func (r *Registry) Register(ctx context.Context, subject string, s sr.Schema) (int, error) {
	compat, err := do(ctx, r, "compatibility of "+subject, func(ctx context.Context) (sr.CheckCompatibilityResult, error) {
		// verbose: the registry says why a schema is not compatible.
		return r.cl.CheckCompatibility(sr.WithParams(ctx, sr.Verbose), subject, -1, s)
	})
	switch {
	case err == nil && !compat.Is:
		msg := "the registry gives no reason"
		if len(compat.Messages) > 0 {
			msg = fmt.Sprint(compat.Messages)
		}
		return 0, fmt.Errorf("format: the schema is not compatible with the latest version of subject %s (the subject's compatibility rule): %s", subject, msg)
	case err != nil && !notFound(err): // not found: a new subject, nothing to be compatible with
		return 0, fmt.Errorf("format: compatibility check of subject %s: %w", subject, err)
	}
	ss, err := do(ctx, r, "register under "+subject, func(ctx context.Context) (sr.SubjectSchema, error) {
		return r.cl.CreateSchema(ctx, subject, s)
	})
	if err != nil {
		return 0, fmt.Errorf("format: register the schema under subject %s: %w", subject, err)
	}
	return ss.ID, nil
}

// RecordName returns the full name of the record a sink's schema writes:
// an Avro schema's named type (a record, enum or fixed), or the Protobuf
// message (message, or the file's first) of a .proto file. It is the
// subject of the RecordNameStrategy.
func RecordName(typ sr.SchemaType, schema, message string) (string, error) {
	switch typ {
	case sr.TypeAvro:
		s, err := avro.Parse(schema)
		if err != nil {
			return "", fmt.Errorf("format: the sink's Avro schema: %w", err)
		}
		n, ok := s.(avro.NamedSchema)
		if !ok {
			return "", fmt.Errorf("format: the Avro schema is a %s, which has no name for a subject", s.Type())
		}
		return n.FullName(), nil
	case sr.TypeProtobuf:
		e := &ProtoEncoder{message: message}
		fd, err := compileProto(context.Background(), mainProto, map[string]string{mainProto: schema})
		if err != nil {
			return "", fmt.Errorf("format: the sink's Protobuf schema: %w", err)
		}
		md, err := e.pick(fd)
		if err != nil {
			return "", err
		}
		return string(md.FullName()), nil
	}
	return "", fmt.Errorf("format: no record names in %s schemas", typ)
}
