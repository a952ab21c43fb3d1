package echobench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/rpc"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/server"
	"github.com/gobrpc/gobrpc/tools/bench/echobenchpb"
	"github.com/gobrpc/gobrpc/tools/bench/echobenchpb/grpcpb"
)

// The server role talks to the driver over its stdin and stdout, one line
// each way:
//
//	server: "listening ADDR"          once serving
//	driver: "begin"   server: "ok"    start of the measured window
//	driver: "end"     server: "stats CPU_NS MALLOCS"  since "begin"
//	driver: EOF on stdin              stop and exit
//
// The gobrpc server serves benchpb.EchoService (echobenchpb) and, for
// brpc's echo_client, example.EchoService (gobrpc's example/echo/echopb,
// the .proto of brpc's examples).
//
// CPU is the process's user+system time (getrusage RUSAGE_SELF, all
// threads), MALLOCS runtime.MemStats.Mallocs: the same as the driver
// measures for the client side.

// gobrpcEcho is the gobrpc echo service.
type gobrpcEcho struct{}

func (gobrpcEcho) Echo(_ *controller.Controller, req *echobenchpb.EchoRequest, resp *echobenchpb.EchoResponse, done func()) {
	resp.Message = req.Message
	done()
}

// gobrpcExampleEcho is the same echo as example.EchoService of brpc's
// examples (gobrpc's example/echo/echopb), which brpc's echo_client calls.
type gobrpcExampleEcho struct{}

func (gobrpcExampleEcho) Echo(_ *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	resp.Message = req.Message
	done()
}

// grpcEcho is the grpc-go echo service.
type grpcEcho struct {
	grpcpb.UnimplementedEchoServiceServer
}

func (grpcEcho) Echo(_ context.Context, req *echobenchpb.EchoRequest) (*echobenchpb.EchoResponse, error) {
	return &echobenchpb.EchoResponse{Message: req.Message}, nil
}

// NetEchoMsg is the request and the response of the net/rpc echo service:
// the payload, as in echo.proto.
type NetEchoMsg struct {
	Message []byte
}

// NetEcho is the net/rpc echo service, registered as EchoService.
type NetEcho struct{}

// Echo answers the request's payload.
func (NetEcho) Echo(req *NetEchoMsg, resp *NetEchoMsg) error {
	resp.Message = req.Message
	return nil
}

const netrpcMethod = "EchoService.Echo"

// serve runs the server role until stdin ends or a signal arrives.
func serve(fw, addr string) error {
	var (
		listen net.Addr
		stop   func()
	)
	switch fw {
	case "gobrpc":
		srv := server.New(nil)
		if err := echobenchpb.RegisterEchoServiceServer(srv, gobrpcEcho{}); err != nil {
			return err
		}
		if err := echopb.RegisterEchoServiceServer(srv, gobrpcExampleEcho{}); err != nil {
			return err
		}
		if err := srv.Start(addr); err != nil {
			return err
		}
		listen = srv.ListenAddress()
		stop = func() { srv.Stop(); srv.Join() }
	case "grpc":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		gs := grpc.NewServer()
		grpcpb.RegisterEchoServiceServer(gs, grpcEcho{})
		go gs.Serve(ln)
		listen = ln.Addr()
		stop = gs.Stop
	case "netrpc":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		rs := rpc.NewServer()
		if err := rs.RegisterName("EchoService", NetEcho{}); err != nil {
			return err
		}
		var (
			mu    sync.Mutex
			conns []net.Conn
		)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				go rs.ServeConn(c)
			}
		}()
		listen = ln.Addr()
		stop = func() {
			ln.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		}
	case "rawtcp":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		rs := serveRawTCP(ln)
		listen = ln.Addr()
		stop = rs.close
	default:
		return fmt.Errorf("unknown -framework %q (gobrpc, grpc, netrpc or rawtcp)", fw)
	}
	fmt.Printf("listening %s\n", listen)

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	var (
		base        usage
		stopProfile = func() {}
	)
	for done := false; !done; {
		select {
		case line, ok := <-lines:
			switch {
			case !ok:
				done = true
			case line == "begin":
				var err error
				if stopProfile, err = startCPUProfile(*cpuProfile); err != nil {
					return err
				}
				base = readUsage()
				fmt.Println("ok")
			case line == "end":
				u := readUsage().sub(base)
				stopProfile()
				fmt.Printf("stats %d %d\n", u.cpu.Nanoseconds(), u.mallocs)
			default:
				fmt.Fprintf(os.Stderr, "echobench server: unknown command %q\n", line)
			}
		case <-sig:
			done = true
		}
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		fmt.Fprintln(os.Stderr, "echobench server: stop took over 3 s; exiting anyway")
	}
	return nil
}

// usage is what a process spent: CPU time and heap allocations.
type usage struct {
	cpu       time.Duration
	mallocs   uint64
	noMallocs bool // not a Go process: allocations not measured
}

func readUsage() usage {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{cpu: processCPU(), mallocs: ms.Mallocs}
}

func (u usage) sub(o usage) usage {
	return usage{cpu: u.cpu - o.cpu, mallocs: u.mallocs - o.mallocs, noMallocs: u.noMallocs || o.noMallocs}
}

// startCPUProfile starts a CPU profile into path (nothing when path is
// empty); the function it returns stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
