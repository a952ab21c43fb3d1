// Command grpc_backup puts gobrpc's backup requests in front of grpc-go
// servers that know nothing of gobrpc: two of grpc-go's helloworld Greeter
// servers (google.golang.org/grpc/examples), called by a grpc-go client and
// then by a gobrpc Channel speaking h2:grpc with a 5% backup budget
// (BackupRequestMaxExtraLoad: the adaptive policy picks its own delay).
//
//	go run .                                    # two Greeter servers in this process, 3% of requests slow
//	go run . -servers 127.0.0.1:50051,127.0.0.1:50052
//
// With -servers it calls servers you started, e.g. grpc-go's own example
// binary, unchanged:
//
//	go run google.golang.org/grpc/examples/helloworld/greeter_server -port 50051
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pb "google.golang.org/grpc/examples/helloworld/helloworld"

	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/example/grpc_backup/greeterbrpc"
)

var (
	servers  = flag.String("servers", "", "comma-separated Greeter servers; empty starts two in this process")
	duration = flag.Duration("duration", 5*time.Second, "how long each client runs")
	rate     = flag.Int("rate", 1000, "calls per second (open loop)")
	slowFrac = flag.Float64("slow_fraction", 0.03, "share of requests the in-process servers answer late")
	slowTime = flag.Duration("slow_time", 50*time.Millisecond, "how late those answers are")
	budget   = flag.Float64("max_extra_load", 0.05, "the gobrpc channel's backup budget (BackupRequestMaxExtraLoad)")
)

// greeter is grpc-go's example server (greeter_server/main.go), with a
// straggler now and then, as any real server has.
type greeter struct {
	pb.UnimplementedGreeterServer
	served *atomic.Int64
}

func (s *greeter) SayHello(ctx context.Context, in *pb.HelloRequest) (*pb.HelloReply, error) {
	s.served.Add(1)
	if rand.Float64() < *slowFrac {
		select {
		case <-time.After(*slowTime):
		case <-ctx.Done(): // a backup won: grpc-go cancels the loser
			return nil, ctx.Err()
		}
	}
	return &pb.HelloReply{Message: "Hello " + in.GetName()}, nil
}

func main() {
	flag.Parse()
	if *rate <= 0 || *rate > 100000 || *duration <= 0 {
		log.Fatal("-rate must be in (0, 100000] and -duration positive")
	}
	served := new(atomic.Int64)
	addrs := strings.Split(*servers, ",")
	if *servers == "" {
		addrs = nil
		for range 2 {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				log.Fatal(err)
			}
			s := grpc.NewServer()
			pb.RegisterGreeterServer(s, &greeter{served: served})
			go s.Serve(lis)
			defer s.Stop()
			addrs = append(addrs, lis.Addr().String())
		}
		fmt.Printf("two grpc-go Greeter servers at %s; %.0f%% of requests answered %v late\n\n", strings.Join(addrs, ", "), 100**slowFrac, *slowTime)
	}

	// grpc-go's client: one connection per server, calls alternate.
	var conns []*grpc.ClientConn
	for _, a := range addrs {
		cc, err := grpc.NewClient("passthrough:///"+a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			log.Fatal(err)
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	var next atomic.Uint64
	grpcGo := func(ctx context.Context) error {
		c := pb.NewGreeterClient(conns[next.Add(1)%uint64(len(conns))])
		_, err := c.SayHello(ctx, &pb.HelloRequest{Name: "world"})
		return err
	}

	// gobrpc in front of the same servers: the backup part is these lines.
	gobrpc := func(maxExtraLoad float64) func(context.Context) error {
		opts := channel.DefaultOptions()
		opts.Protocol = "h2:grpc"
		opts.TimeoutMs = 1000
		if maxExtraLoad > 0 {
			opts.BackupRequestMaxExtraLoad = maxExtraLoad
		}
		ch, err := channel.New("list://"+strings.Join(addrs, ","), "rr", &opts)
		if err != nil {
			log.Fatal(err)
		}
		client := greeterbrpc.NewGreeterClient(ch)
		return func(ctx context.Context) error {
			_, err := client.SayHello(ctx, &pb.HelloRequest{Name: "world"})
			return err
		}
	}

	fmt.Printf("%-34s %8s %8s %8s %9s %7s %8s\n", "client", "calls", "p50 ms", "p99 ms", "p99.9 ms", "failed", "load")
	run("grpc-go", grpcGo, served)
	run("gobrpc h2:grpc, no backup", gobrpc(0), served)
	run(fmt.Sprintf("gobrpc h2:grpc, %.0f%% backup budget", 100**budget), gobrpc(*budget), served)
	if *servers != "" {
		fmt.Println("\n(load: requests served per call, known only for the in-process servers)")
	}
}

// run calls f at -rate per second for -duration and prints the latencies
// and the load on the servers (requests served per call).
func run(name string, f func(context.Context) error, served *atomic.Int64) {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failed    int
		wg        sync.WaitGroup
	)
	before := served.Load()
	interval := time.Second / time.Duration(*rate)
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if due.Sub(start) >= *duration {
			break
		}
		time.Sleep(time.Until(due))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			t := time.Now()
			err := f(ctx)
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			latencies = append(latencies, d)
		})
	}
	wg.Wait()
	calls := len(latencies) + failed
	slices.Sort(latencies)
	q := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
	}
	load := "-"
	if n := served.Load() - before; n > 0 && calls > 0 {
		load = fmt.Sprintf("%.3f×", float64(n)/float64(calls))
	}
	fmt.Printf("%-34s %8d %8.2f %8.2f %9.2f %7d %8s\n", name, calls, q(0.5), q(0.99), q(0.999), failed, load)
}
