// Package cli is Weir's command line: the program of the stock processor
// binary and of any binary built around a job defined in Go. It owns the
// sub-commands (run, dev, validate, plan, checkpoints, transactions,
// resume, produce, nexmark, version), the embedded Kafka of dev, the
// process lifecycle (signals, the exit status), the HTTP endpoints and the
// process logger; everything else lives in the packages
// it wires together. It keeps no state between calls of Run.
//
// The stock binary runs the YAML job of its configuration:
//
//	func main() { cli.Main(nil) }
//
// A Go program runs its own job, built with package stream, with the same
// commands, configuration, endpoints and lifecycle:
//
//	func main() { cli.Main(job) }
//
// The configuration of a Go job holds everything but the job itself:
// job.pipeline must be empty, and job.name defaults to the Go job's name
// and, when set, must equal it (config.Source.GoJob).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/stream"
)

// version is set at build time with
// -ldflags "-X github.com/weir-stream/weir/cli.version=...".
var version = "dev"

// module is Weir's module path, to find its version in a Go program's
// build information.
const module = "github.com/weir-stream/weir"

// Main runs the command line of os.Args with job and exits the process: 0
// when the command succeeded, 1 when it failed (the error is printed to
// standard error). job is a job defined in Go, built or not; nil runs the
// YAML job of the configuration, as the stock processor binary does.
func Main(job *stream.Job) {
	os.Exit(Run(context.Background(), os.Args[1:], job, os.Stdout, os.Stderr))
}

// Run runs the command line args (without the program name) with job (nil:
// the configuration's YAML job) and returns the process's exit status: 0,
// or 1 after printing the error to stderr. Commands print their output to
// stdout and their logs to stderr; run and dev also stop on SIGTERM and
// SIGINT, and every command stops when ctx ends.
func Run(ctx context.Context, args []string, job *stream.Job, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, job)
	root.SetErr(stderr)
	if args == nil {
		args = []string{} // cobra reads os.Args when given nil
	}
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		if !errors.As(err, new(reported)) {
			fmt.Fprintln(stderr, "error:", err)
		}
		return 1
	}
	return 0
}

// newRootCmd is the command tree for job (nil: the configuration's YAML
// job), printing to out.
func newRootCmd(out io.Writer, job *stream.Job) *cobra.Command {
	root := &cobra.Command{
		Use:           "processor",
		Short:         "Weir: a Kafka-native, exactly-once stream processor",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if job != nil {
		root.Use = job.Name()
		root.Short = "The Weir job " + job.Name() + " (defined in Go): a Kafka-native, exactly-once stream processor"
	}
	root.SetOut(out)
	root.AddCommand(newVersionCmd(job), newValidateCmd(job), newRunCmd(job), newDevCmd(job),
		newPlanCmd(job), newCheckpointsCmd(job), newTransactionsCmd(job), newResumeCmd(job), newSavepointCmd(job), newSavepointsCmd(job), newStopCmd(job), newNexmarkCmd(job),
		newProduceCmd(job), newStatusCmd(job))
	return root
}

func newVersionCmd(job *stream.Job) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the program's version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			goVersion, weir := "unknown", version
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
				if weir == "dev" {
					weir = moduleVersion(bi, weir)
				}
			}
			out := cmd.OutOrStdout()
			if job == nil {
				_, err := fmt.Fprintf(out, "processor %s (%s)\n", weir, goVersion)
				return err
			}
			_, err := fmt.Fprintf(out, "%s (job defined in Go; weir %s, %s)\n", job.Name(), weir, goVersion)
			return err
		},
	}
}

// moduleVersion is the version of Weir the build information records, or
// def: the version a Go program was built with (a dependency), or that of
// a build of Weir itself stamped by the go command (a tag, or a
// pseudo-version of the commit).
func moduleVersion(bi *debug.BuildInfo, def string) string {
	if bi.Main.Path == module {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		return def
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			return d.Version
		}
	}
	return def
}

// configSource is where a command's configuration comes from: file, the
// WEIR_* environment variables and the command's flags; with a Go job, the
// configuration is the job's (config.Source.GoJob).
func configSource(file string, flags *pflag.FlagSet, job *stream.Job) config.Source {
	src := config.Source{File: file, Flags: flags}
	if job != nil {
		src.GoJob = job.Name()
	}
	return src
}

// loadConfig loads a command's configuration (configSource). A Go job that
// does not build is reported first: no configuration can fix it.
func loadConfig(file string, flags *pflag.FlagSet, job *stream.Job) (*config.Config, error) {
	return loadSource(configSource(file, flags, job), flags, job)
}

// loadOfflineConfig is loadConfig for a command that connects to nothing
// (config.Source.Offline): connection settings are not required.
func loadOfflineConfig(file string, flags *pflag.FlagSet, job *stream.Job) (*config.Config, error) {
	src := configSource(file, flags, job)
	src.Offline = true
	return loadSource(src, flags, job)
}

// loadSource is loadConfig from src.
func loadSource(src config.Source, flags *pflag.FlagSet, job *stream.Job) (*config.Config, error) {
	if job != nil {
		if err := job.Build(); err != nil {
			return nil, goJobError(job, err)
		}
	}
	cfg, err := config.Load(src)
	if err != nil {
		return nil, fmt.Errorf("configuration:\n%w", err)
	}
	if f := flags.Lookup(allowNonRestoredFlag); f != nil && f.Value.String() == "true" {
		cfg.Process.AllowNonRestoredState = true
	}
	return cfg, nil
}

// jobOf returns the built job a command runs: the Go job, or else the
// configuration's YAML pipeline, compiled (its problems by key path, where
// each value was set).
func jobOf(cfg *config.Config, job *stream.Job) (*stream.Job, error) {
	return jobWith(cfg, job, pipeline.Env{})
}

// jobWith is jobOf for a process that runs the job: env gives its formats
// the process's context and shared schema-registry clients.
func jobWith(cfg *config.Config, job *stream.Job, env pipeline.Env) (*stream.Job, error) {
	if job != nil {
		if err := job.Build(); err != nil {
			return nil, goJobError(job, err)
		}
		return job, nil
	}
	j, err := pipeline.CompileWith(cfg.Job, env)
	if err != nil {
		return nil, fmt.Errorf("job: %w", cfg.Annotate(err))
	}
	return j, nil
}

func goJobError(job *stream.Job, err error) error {
	return fmt.Errorf("job %s (defined in Go) does not build: %w", job.Name(), err)
}
