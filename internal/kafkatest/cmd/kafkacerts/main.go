// Command kafkacerts writes the real test broker's TLS directory
// (kafkatest.WriteBrokerTLS): a CA, the broker's PEM keystore for 127.0.0.1
// and localhost, and a client certificate. scripts/kafka.sh runs it at `up`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/weir-stream/weir/internal/kafkatest"
)

func main() {
	dir := flag.String("dir", "", "the directory to write (replaced)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "kafkacerts: -dir is required")
		os.Exit(2)
	}
	if err := kafkatest.WriteBrokerTLS(*dir); err != nil {
		fmt.Fprintf(os.Stderr, "kafkacerts: %v\n", err)
		os.Exit(1)
	}
}
