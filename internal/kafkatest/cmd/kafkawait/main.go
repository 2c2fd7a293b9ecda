// Command kafkawait waits until a Kafka broker answers metadata and API
// version requests, then prints the protocol version it speaks. The test
// scripts use it to know when a freshly started broker is ready.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/weir-stream/weir/internal/kafkatest"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap addresses")
	timeout := flag.Duration("timeout", 60*time.Second, "how long to wait")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var last error
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		guess, err := kafkatest.Ping(attempt, strings.Split(*brokers, ","))
		cancelAttempt()
		if err == nil {
			fmt.Printf("broker at %s answers (protocol %s)\n", *brokers, guess)
			return
		}
		last = err
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "kafkawait: no answer from %s within %v: %v\n", *brokers, *timeout, last)
			os.Exit(1)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
