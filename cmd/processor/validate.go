package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
)

func newValidateCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "validate -c FILE",
		Short: "Check a configuration (YAML, environment, flags) without starting anything",
		Long: `validate loads the configuration exactly as "run" would — defaults, the YAML
file, WEIR_<SECTION>_<KEY> environment variables and the same flags as
"run" — reports every problem, one per line, each with where the value came
from (file:line:column, variable or flag) and its key path, and compiles
the pipeline. It exits 1 if there is any problem. It connects to nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(config.Source{File: file, Flags: cmd.Flags()})
			if err != nil {
				out := cmd.ErrOrStderr()
				problems := unjoin(err)
				for _, p := range problems {
					fmt.Fprintln(out, p)
				}
				return fmt.Errorf("%s: %d problem(s)", file, len(problems))
			}
			if _, err := pipeline.Compile(cfg.Job); err != nil {
				for _, p := range unjoin(cfg.Annotate(err)) {
					fmt.Fprintln(cmd.ErrOrStderr(), p)
				}
				return fmt.Errorf("%s: the pipeline does not compile", file)
			}
			for _, w := range cfg.Warnings() {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (job %s, %d steps)\n", file, cfg.Job.Name, len(cfg.Job.Pipeline))
			return nil
		},
	}
	addConfigFlags(cmd.Flags(), &file)
	_ = cmd.MarkFlagRequired("config")
	return cmd
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
