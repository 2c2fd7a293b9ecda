// Command processor is the stock Weir binary: one replica of the YAML job
// its configuration describes. The command line itself is package cli, which
// a Go program calls with its own job instead (cli.Main(job)).
package main

import "github.com/weir-stream/weir/cli"

func main() { cli.Main(nil) }
