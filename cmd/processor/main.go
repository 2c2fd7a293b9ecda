// Command processor is the Weir binary: one replica of a Weir job. It owns the
// process lifecycle, sub-commands and HTTP endpoints; everything else lives in
// the packages it wires together.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRootCmd(os.Stdout).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCmd(out io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "processor",
		Short:         "Weir: a Kafka-native, exactly-once stream processor",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.AddCommand(newVersionCmd(), newValidateCmd(), newRunCmd(), newDevCmd(), newCheckpointsCmd(), newTransactionsCmd(), newResumeCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the processor's version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "processor %s (%s)\n", version, goVersion)
			return err
		},
	}
}
