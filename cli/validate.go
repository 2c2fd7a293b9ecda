package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/stream"
)

func newValidateCmd(job *stream.Job) *cobra.Command {
	var file, against string
	cmd := &cobra.Command{
		Use:   "validate -c FILE",
		Short: "Check a configuration (YAML, environment, flags) without starting anything",
		Long: `validate loads the configuration exactly as "run" would — defaults, the YAML
file, WEIR_<SECTION>_<KEY> environment variables and the same flags as
"run" — reports every problem, one per line, each with where the value came
from (file:line:column, variable or flag) and its key path, and compiles
the pipeline (or, in a program built around a job defined in Go, builds that
job). It exits 1 if there is any problem. It connects to nothing, so it
does not require the connection settings (kafka.brokers): a job file
without a kafka section validates, with a note that run needs them.

With --against, it then runs the compatibility check a replica runs before
it restores a checkpoint (docs/operations.md, "Upgrading a job"): the job
of FILE against the state schema that checkpoint recorded. It prints every
difference (compatible: a new operator starts empty; drops state: allowed
only with --allow-non-restored-state; refused) and exits 1 if the job could
not restore it. --against takes latest (the newest checkpoint of the job's
checkpoint.storage), a checkpoint (12, chk-12), savepoints/NAME, or the
URL of a checkpoint's folder in any object store
(s3://bucket/root/<job>/chk-12). It reads the object store only, not Kafka:
the input's partition count is taken from the checkpoint.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if job != nil {
				if err := job.Build(); err != nil {
					return goJobError(job, err)
				}
			}
			// It connects to nothing: connection settings are not
			// required (run says if one is missing).
			src := configSource(file, cmd.Flags(), job)
			src.Offline = true
			cfg, err := config.Check(src)
			if err != nil {
				out := cmd.ErrOrStderr()
				problems := unjoin(err)
				if cfg != nil && job == nil {
					problems = append(problems, exprProblems(cfg, problems)...)
				}
				for _, p := range problems {
					fmt.Fprintln(out, p)
				}
				return fmt.Errorf("%s: %d problem(s)", file, len(problems))
			}
			if job == nil {
				if _, err := pipeline.Compile(cfg.Job); err != nil {
					for _, p := range unjoin(cfg.Annotate(err)) {
						fmt.Fprintln(cmd.ErrOrStderr(), p)
					}
					return fmt.Errorf("%s: the pipeline does not compile", file)
				}
			}
			for _, w := range cfg.Warnings() {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			if len(cfg.Kafka.Brokers) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: kafka.brokers is not set: run needs it (in the file, in %s or as --kafka.brokers)\n", config.EnvName("kafka.brokers"))
			}
			if job == nil {
				for _, p := range cfg.StepsWithoutID() {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s keeps state without an id: its name is derived from its kind and rank, which a step of its kind inserted before it changes (its state then follows it only if no other step of its kind is defined as it is); set id: to keep it across edits (docs/operations.md, \"Upgrading a job\")\n", p)
				}
			}
			if against != "" {
				if cmd.Flags().Lookup(allowNonRestoredFlag).Value.String() == "true" {
					cfg.Process.AllowNonRestoredState = true
				}
				built, err := jobOf(cfg, job)
				if err != nil {
					return err
				}
				if err := checkAgainst(cmd.Context(), cmd.OutOrStdout(), cfg, built, against); err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
			}
			if job != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (job %s, defined in Go)\n", file, cfg.Job.Name)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (job %s, %d steps)\n", file, cfg.Job.Name, len(cfg.Job.Pipeline))
			return nil
		},
	}
	addConfigFlags(cmd.Flags(), &file)
	addAllowNonRestoredFlag(cmd.Flags())
	cmd.Flags().StringVar(&against, "against", "", "also check that the job can restore this checkpoint or savepoint: latest, 12, chk-12, savepoints/NAME, or a URL (reads the object store, not Kafka)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// exprProblems checks each expression of a job that has other problems
// (so that pipeline.Compile cannot run), types included, so that validate
// reports every problem at once (pipeline.CheckExprs). An expression whose
// setting already has a problem is left out.
func exprProblems(cfg *config.Config, have []error) []error {
	reported := map[string]bool{}
	for _, p := range have {
		var fe *config.FieldError
		if errors.As(p, &fe) {
			reported[fe.Path] = true
		}
	}
	return pipeline.CheckExprs(cfg.Job, reported)
}

// unjoin flattens errors.Join trees into their leaves.
func unjoin(err error) []error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) && len(j.Unwrap()) > 0 {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}
