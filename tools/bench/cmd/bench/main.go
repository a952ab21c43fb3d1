// Command bench runs tools/bench's side-by-side benchmarks, one after the
// other or one of them:
//
//	go run ./cmd/bench                 # echo, then backup, then overload (about 14 minutes)
//	go run ./cmd/bench -quick          # the same with short runs (about 3 minutes)
//	go run ./cmd/bench echo [flags]    # gobrpc vs grpc-go, net/rpc, raw TCP, C++ brpc (package echobench)
//	go run ./cmd/bench backup [flags]  # backup requests (package backupbench)
//	go run ./cmd/bench overload [flags] # concurrency limiters (package overloadbench)
//
// Each subcommand takes the flags of its package (-help lists them).
package main

import (
	"fmt"
	"os"

	"github.com/gobrpc/gobrpc/tools/bench/backupbench"
	"github.com/gobrpc/gobrpc/tools/bench/echobench"
	"github.com/gobrpc/gobrpc/tools/bench/overloadbench"
)

// quickArgs shorten every suite for -quick.
var quickArgs = map[string][]string{
	"echo":     {"-duration", "2s", "-repeat", "1", "-warmup", "500ms"},
	"backup":   {"-duration_s", "5", "-normal_s", "5", "-stall_s", "4"},
	"overload": {"-duration_s", "4", "-warmup_s", "1", "-peak_s", "2"},
}

func main() {
	args := os.Args[1:]
	var err error
	switch {
	case len(args) > 0 && args[0] == "echo":
		err = echobench.Main([]string{"echo"}, args[1:])
	case len(args) > 0 && args[0] == "backup":
		err = backupbench.Main(args[1:])
	case len(args) > 0 && args[0] == "overload":
		err = overloadbench.Main(args[1:])
	case len(args) == 0 || (len(args) == 1 && args[0] == "-quick"):
		quick := len(args) == 1
		suites := []struct {
			name string
			run  func([]string) error
		}{
			{"echo", func(a []string) error { return echobench.Main([]string{"echo"}, a) }},
			{"backup", backupbench.Main},
			{"overload", overloadbench.Main},
		}
		for _, s := range suites {
			var a []string
			if quick {
				a = quickArgs[s.name]
			}
			fmt.Printf("\n######## %s\n\n", s.name)
			if err = s.run(a); err != nil {
				break
			}
		}
	default:
		err = fmt.Errorf("usage: bench [-quick] | bench echo|backup|overload [flags]; got %q", args)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
