// Package echobench compares gobrpc with grpc-go, Go's net/rpc, a raw TCP
// echo and, when its examples are built, C++ brpc, on an echo service over
// loopback: the same echobenchpb/echo.proto for gobrpc and grpc-go (net/rpc
// sends a struct with the same []byte through gob; brpc's examples and
// gobrpc's example/echo/echopb carry the same bytes in a proto2 string),
// the same payload, the same closed-loop client.
//
// For each scenario (payload 16 B and 1 KB x 1, 64 and 512 callers) and
// each framework (gobrpc with a single connection, gobrpc with pooled
// connections, grpc-go, net/rpc, raw TCP frames) the driver starts a server
// in a child process (this binary with -role=server, on a free 127.0.0.1
// port), runs the callers in its own process for -warmup and then
// -duration, and measures QPS, exact p50/p99/p999 and the mean over every
// call of the window, CPU seconds per 100k calls and allocations per call,
// each the sum of client (this process) and server (the child). The
// frameworks of a scenario run back to back, A B C D A B C D for -repeat
// rounds, so that drift of the machine falls on all of them alike; the
// table shows medians over the rounds and the ratios to grpc-go (and to
// brpc-brpc when it runs). -chart writes an SVG of QPS and p99 against
// callers.
//
// With ECHOBENCH_BRPC_DIR set to the example/ folder of a built
// apache/brpc, three more pairs (client-server) run brpc's
// multi_threaded_echo_c++ programs as children: gobrpc-brpc (gobrpc's
// client, single connection, against brpc's echo_server), brpc-brpc
// (brpc's echo_client against its echo_server) and brpc-gobrpc (brpc's
// echo_client against the gobrpc server child). brpc's echo_client is a
// process that logs its QPS and mean latency once a second: for it QPS is
// the median of those seconds within the window, the mean their weighted
// mean, and the percentiles are not measured. brpc's CPU time is read from
// /proc/PID/stat; its allocations are not measured. Without the variable
// these pairs are skipped, with one line on stderr.
//
// Run from tools/bench (or as go run ./cmd/bench echo ...):
//
//	go run ./cmd/echobench                                   # everything, about 7 minutes (11 with brpc)
//	go run ./cmd/echobench -duration 1s -repeat 1 -scenarios '16B/1,1KB/64'
//	ECHOBENCH_BRPC_DIR=$HOME/brpc/example go run ./cmd/echobench -frameworks gobrpc-single,gobrpc-brpc,brpc-brpc,brpc-gobrpc
//	go run ./cmd/echobench -role=server -framework=grpc -addr=127.0.0.1:9000
package echobench

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	role       = Flags.String("role", "driver", "driver (run the benchmark) or server (serve one framework; the driver starts these)")
	framework  = Flags.String("framework", "gobrpc", "with -role=server: gobrpc, grpc, netrpc or rawtcp")
	addr       = Flags.String("addr", "127.0.0.1:0", "with -role=server: listen address")
	duration   = Flags.Duration("duration", 5*time.Second, "measured time of each run")
	warmup     = Flags.Duration("warmup", time.Second, "unmeasured time before each run's measurement")
	repeat     = Flags.Int("repeat", 2, "rounds: each round runs every framework once, back to back; the table shows medians")
	payloads   = Flags.String("payloads", "16,1024", "comma-separated payload sizes in bytes")
	callers    = Flags.String("callers", "1,64,512", "comma-separated numbers of closed-loop callers")
	frameworks = Flags.String("frameworks", "gobrpc-single,gobrpc-pooled,grpc,netrpc,rawtcp,gobrpc-brpc,brpc-brpc,brpc-gobrpc",
		"comma-separated frameworks to run: gobrpc-single, gobrpc-pooled, gobrpc-ctx (the context-first client), grpc, gobrpc-grpc (gobrpc's h2:grpc channel to grpc-go's server), grpc-gobrpc (grpc-go's client to gobrpc's server), netrpc, "+
			"rawtcp (raw TCP frames, one connection per caller: the floor); with "+brpcDirEnv+" set, the client-server pairs with C++ brpc: "+
			"gobrpc-brpc, brpc-brpc, brpc-gobrpc (skipped without it)")
	scenarios  = Flags.String("scenarios", "", "comma-separated patterns (path.Match) of the scenarios to run, named payload/callers: '16B/1,1KB/*'; empty runs all")
	timeoutMs  = Flags.Int("timeout_ms", 0, "per-call deadline of every framework; 0 means none (gobrpc TimeoutMs -1, grpc context.Background())")
	chart      = Flags.String("chart", "echobench.svg", "SVG chart to write (QPS and p99 against callers); empty writes none")
	verbose    = Flags.Bool("v", false, "print every run's numbers as it ends (always on stderr)")
	cpuProfile = Flags.String("cpuprofile", "", "write CPU profiles of the measured window: PREFIX.SCENARIO.FRAMEWORK.client.pprof and .server.pprof (of the last round); with -role=server the server's file")
)

// Flags are echobench's flags, parsed by Main.
var Flags = flag.NewFlagSet("echobench", flag.ExitOnError)

// subcommand is what follows the executable on the command line that runs
// echobench (empty for cmd/echobench, "echo" for cmd/bench): the driver
// starts its servers as the same executable with subcommand and -role=server.
var subcommand []string

// Main runs echobench with args (the command line after the program and
// subcommand names).
func Main(sub []string, args []string) error {
	subcommand = sub
	if err := Flags.Parse(args); err != nil {
		return err
	}
	switch *role {
	case "server":
		if err := serve(*framework, *addr); err != nil {
			return fmt.Errorf("echobench server: %w", err)
		}
		return nil
	case "driver":
		if err := drive(); err != nil {
			return fmt.Errorf("echobench: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("echobench: unknown -role %q (driver or server)", *role)
	}
}

// scenario is one payload size and number of callers.
type scenario struct {
	payload int
	callers int
}

func (s scenario) name() string { return sizeName(s.payload) + "/" + strconv.Itoa(s.callers) }

func sizeName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return strconv.Itoa(n/1024) + "KB"
	}
	return strconv.Itoa(n) + "B"
}

func parseInts(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-%s: %q is not a positive integer", name, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s is empty", name)
	}
	return out, nil
}

// selectScenarios is every payload x callers pair -scenarios matches.
func selectScenarios() ([]scenario, error) {
	ps, err := parseInts("payloads", *payloads)
	if err != nil {
		return nil, err
	}
	cs, err := parseInts("callers", *callers)
	if err != nil {
		return nil, err
	}
	var pats []string
	for _, p := range strings.Split(*scenarios, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("-scenarios: bad pattern %q: %v", p, err)
			}
			pats = append(pats, p)
		}
	}
	var out []scenario
	for _, p := range ps {
		for _, c := range cs {
			s := scenario{payload: p, callers: c}
			ok := len(pats) == 0
			for _, pat := range pats {
				if m, _ := path.Match(pat, s.name()); m {
					ok = true
				}
			}
			if ok {
				out = append(out, s)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-scenarios %q matches none of the scenarios of -payloads %q and -callers %q", *scenarios, *payloads, *callers)
	}
	return out, nil
}

// selectFrameworks is -frameworks, without those that need brpc's
// examples when ECHOBENCH_BRPC_DIR is not set: one line on log says so.
func selectFrameworks(log io.Writer) ([]string, error) {
	var out, skipped []string
	brpcDir := os.Getenv(brpcDirEnv) != ""
	for _, f := range strings.Split(*frameworks, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		cf, ok := clientFrameworks[f]
		if !ok {
			return nil, fmt.Errorf("-frameworks: unknown %q (%s)", f, strings.Join(frameworkNames, ", "))
		}
		if cf.needsBrpc() && !brpcDir {
			skipped = append(skipped, f)
			continue
		}
		out = append(out, f)
	}
	if len(skipped) > 0 {
		fmt.Fprintf(log, "echobench: skipping %s: set %s to the example/ folder of a built apache/brpc (with multi_threaded_echo_c++/echo_server and echo_client) to run them\n",
			strings.Join(skipped, ", "), brpcDirEnv)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-frameworks is empty")
	}
	if slices.ContainsFunc(out, func(f string) bool { return clientFrameworks[f].needsBrpc() }) {
		if err := checkBrpcDir(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
