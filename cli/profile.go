package cli

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/pflag"
)

// profileFiles are where `processor run` writes Go profiles of its whole
// run (--cpu-profile, --alloc-profile): for benchmarks (make bench-profile)
// and for a person chasing CPU or allocations without an HTTP profiler.
type profileFiles struct {
	cpu, alloc string
}

func addProfileFlags(fs *pflag.FlagSet, p *profileFiles) {
	fs.StringVar(&p.cpu, "cpu-profile", "", "write a CPU profile of the whole run to this file (go tool pprof), from start until the replica stops")
	fs.StringVar(&p.alloc, "alloc-profile", "", "write an allocation profile (every allocation since start) to this file when the replica stops")
}

// start starts the CPU profile, if asked; the returned function ends it
// and writes the allocation profile.
func (p profileFiles) start() (func() error, error) {
	var cpu *os.File
	if p.cpu != "" {
		f, err := os.Create(p.cpu)
		if err != nil {
			return nil, fmt.Errorf("--cpu-profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--cpu-profile: %w", err)
		}
		cpu = f
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				errs = append(errs, fmt.Errorf("--cpu-profile: %w", err))
			}
		}
		if p.alloc != "" {
			runtime.GC() // the profile's figures as of the last GC
			f, err := os.Create(p.alloc)
			if err == nil {
				err = errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("--alloc-profile: %w", err))
			}
		}
		return errors.Join(errs...)
	}, nil
}
