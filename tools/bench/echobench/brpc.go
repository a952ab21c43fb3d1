package echobench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// C++ brpc's side of the comparison: the example programs of a built
// apache/brpc, found through ECHOBENCH_BRPC_DIR (its example/ folder).
// Only multi_threaded_echo_c++ is used: its echo_server echoes the request
// (and the attachment), its echo_client is a load generator (-thread_num
// closed-loop senders on one channel) that logs its QPS and average latency
// once a second. Both speak example.EchoService of
// multi_threaded_echo_c++/echo.proto (proto2, required string message = 1),
// the service of gobrpc's example/echo/echopb: the gobrpc client calls it
// with that package's stub, and the gobrpc server child serves it next to
// benchpb.EchoService. The payload is ASCII and string and bytes fields
// are the same on the wire (field 1, length-delimited), so the messages
// carried are those of echobenchpb, byte for byte.

// brpcDirEnv names the folder holding brpc's built examples.
const brpcDirEnv = "ECHOBENCH_BRPC_DIR"

// brpcServerRole is clientFramework.server of the frameworks served by
// brpc's echo_server.
const brpcServerRole = "brpc"

// brpcExampleDir is the folder of the example programs used.
func brpcExampleDir() string {
	return filepath.Join(os.Getenv(brpcDirEnv), "multi_threaded_echo_c++")
}

// checkBrpcDir checks that ECHOBENCH_BRPC_DIR holds the built programs.
func checkBrpcDir() error {
	dir := brpcExampleDir()
	for _, p := range []string{"echo_server", "echo_client"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			return fmt.Errorf("%s=%s: %w (build brpc's example/multi_threaded_echo_c++ there)", brpcDirEnv, os.Getenv(brpcDirEnv), err)
		}
		if fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s=%s: %s is not executable", brpcDirEnv, os.Getenv(brpcDirEnv), filepath.Join(dir, p))
		}
	}
	return nil
}

// timedLine is a line of a child's output and when the driver read it.
type timedLine struct {
	at   time.Time
	text string
}

// brpcProc is a running brpc example program, its stdout and stderr
// (brpc logs to stderr) read line by line into lines.
type brpcProc struct {
	name  string
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has been waited for
	mu    sync.Mutex
	lines []timedLine
	watch func(string) // called with each line as it comes, from the reader
}

func startBrpcProc(name string, watch func(string), args ...string) (*brpcProc, error) {
	dir := brpcExampleDir()
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Dir = dir // the server reads cert.pem and key.pem from its folder
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &brpcProc{name: name, cmd: cmd, done: make(chan struct{}), watch: watch}
	read := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l := timedLine{at: time.Now(), text: sc.Text()}
			p.mu.Lock()
			p.lines = append(p.lines, l)
			p.mu.Unlock()
			if p.watch != nil {
				p.watch(l.text)
			}
		}
		io.Copy(io.Discard, pr)
		close(read)
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		<-read
		close(p.done)
	}()
	return p, nil
}

func (p *brpcProc) output() []timedLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// tail is the last n lines of the output, for error messages.
func (p *brpcProc) tail(n int) string {
	ls := p.output()
	ls = ls[max(0, len(ls)-n):]
	var b strings.Builder
	for _, l := range ls {
		b.WriteString("\n\t" + l.text)
	}
	return b.String()
}

func (p *brpcProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *brpcProc) cpu() (time.Duration, error) {
	return processCPUOf(p.cmd.Process.Pid)
}

// stop asks the program to quit (SIGINT, what brpc's examples wait for)
// and kills it if it is not gone in 5 s.
func (p *brpcProc) stop() {
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		fmt.Fprintf(os.Stderr, "echobench: brpc's %s did not exit 5 s after SIGINT; killing it\n", p.name)
		p.kill()
	}
}

func (p *brpcProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// brpcServer is brpc's multi_threaded_echo_c++ echo_server on a free port.
// Its CPU time is read from /proc; its allocations are not measured.
type brpcServer struct {
	*brpcProc
	addr string
	cpu0 time.Duration
}

func startBrpcServer() (*brpcServer, error) {
	var lastErr error
	for range 3 { // a free port may be taken before the server binds it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		ready := make(chan struct{})
		var once sync.Once
		p, err := startBrpcProc("echo_server", func(l string) {
			if strings.Contains(l, "is serving on port=") {
				once.Do(func() { close(ready) })
			}
		}, "-port", strconv.Itoa(port))
		if err != nil {
			return nil, err
		}
		select {
		case <-ready:
			return &brpcServer{brpcProc: p, addr: "127.0.0.1:" + strconv.Itoa(port)}, nil
		case <-p.done:
			lastErr = fmt.Errorf("brpc's echo_server -port %d exited:%s", port, p.tail(10))
		case <-time.After(10 * time.Second):
			p.kill()
			return nil, fmt.Errorf("brpc's echo_server -port %d: not serving after 10 s:%s", port, p.tail(10))
		}
	}
	return nil, lastErr
}

// freePort is a TCP port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *brpcServer) address() string { return s.addr }

func (s *brpcServer) begin() error {
	if s.exited() {
		return fmt.Errorf("brpc's echo_server exited:%s", s.tail(10))
	}
	var err error
	s.cpu0, err = s.cpu()
	return err
}

func (s *brpcServer) end() (usage, error) {
	c, err := s.cpu()
	if err != nil {
		return usage{}, fmt.Errorf("brpc's echo_server: %w", err)
	}
	return usage{cpu: c - s.cpu0, noMallocs: true}, nil
}

// startBrpcClient runs brpc's multi_threaded_echo_c++ echo_client against
// addr: callers bthreads (-thread_num; -use_bthread) sending payload-byte
// requests on one single connection (the default of baidu_std), without
// attachment, with no deadline unless -timeout_ms is set (brpc's
// -timeout_ms=-1), no retry (-max_retry=0, as every client here), and
// -dont_fail: a failed call aborts it, which the driver reports.
func startBrpcClient(addr string, callers, payload int, connType string, dummyPort int) (*brpcProc, error) {
	timeout := -1
	if *timeoutMs > 0 {
		timeout = *timeoutMs
	}
	if connType == "" {
		connType = "single"
	}
	return startBrpcProc("echo_client", nil,
		"-thread_num", strconv.Itoa(callers), "-use_bthread=true",
		"-request_size", strconv.Itoa(payload), "-attachment_size", "0",
		"-server", addr, "-timeout_ms="+strconv.Itoa(timeout), "-max_retry=0", "-dont_fail",
		"-connection_type="+connType, "-dummy_port="+strconv.Itoa(dummyPort))
}

// brpcClientPercentiles reads p99 and p99.9 from echo_client's own
// LatencyRecorder ("client") on its dummy server's /vars: over its window
// (bvar's 10 s, so the warm-up is in it), not exactly the measured one.
func brpcClientPercentiles(dummyPort int) (p99, p999 time.Duration, err error) {
	read := func(name string) (time.Duration, error) {
		// As curl asks: brpc's /vars answers a Go client's default request
		// (gzip accepted, Go's user agent) with "Fail to find any bvar".
		hc := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableCompression: true}}
		req, err := http.NewRequest("GET", "http://127.0.0.1:"+strconv.Itoa(dummyPort)+"/vars/"+name, nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("User-Agent", "curl/8")
		r, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return 0, err
		}
		text := strings.TrimSpace(string(b)) // "client_latency_99 : 123"
		if i := strings.LastIndexByte(text, ':'); i >= 0 {
			text = strings.TrimSpace(text[i+1:])
		}
		us, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/vars/%s: %q", name, b)
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	if p99, err = read("client_latency_99"); err != nil {
		return 0, 0, err
	}
	p999, err = read("client_latency_999")
	return p99, p999, err
}

// brpcClientLine matches echo_client's line of each second, such as
//
//	I1201 15:33:17.029313  2163     0 client.cpp:145 main] Sending EchoRequest at qps=13079 latency=75
//
// qps is the calls that succeeded in the last second (bvar's qps(1)),
// latency their average in µs.
var brpcClientLine = regexp.MustCompile(`Sending EchoRequest at qps=(\d+) latency=(\d+)`)

// parseBrpcClientLine reads qps and latency (µs) from one line of
// echo_client's output.
func parseBrpcClientLine(line string) (qps, latencyUs float64, ok bool) {
	m := brpcClientLine.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, false
	}
	q, err1 := strconv.ParseFloat(m[1], 64)
	l, err2 := strconv.ParseFloat(m[2], 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return q, l, true
}

// brpcLineSlack is how far a per-second line may fall outside the window
// and still count: the driver reads it a little after the client wrote it,
// and the client's seconds do not start with the window.
const brpcLineSlack = 200 * time.Millisecond

// brpcWindow reads the per-second lines of echo_client's output that cover
// seconds within [t0, t1]: a line read at t covers the second before t, so
// it counts when t-1s >= t0-slack and t <= t1+slack. The client's first
// line (its first second, before bvar has a sample: qps=0) never counts.
// qps is the median of the per-second QPS, avg the mean latency of the
// window's calls (the per-second averages weighted by their QPS).
func brpcWindow(lines []timedLine, t0, t1 time.Time) (qps float64, avg time.Duration, seconds int, err error) {
	var qs []float64
	var calls, latSum float64
	first := true
	for _, l := range lines {
		q, lat, ok := parseBrpcClientLine(l.text)
		if !ok {
			continue
		}
		if first {
			first = false
			continue
		}
		if l.at.Add(-time.Second).Before(t0.Add(-brpcLineSlack)) || l.at.After(t1.Add(brpcLineSlack)) {
			continue
		}
		qs = append(qs, q)
		calls += q
		latSum += q * lat
	}
	if len(qs) == 0 {
		return 0, 0, 0, fmt.Errorf("no per-second line of brpc's echo_client within the %v window (-duration of 2s or more gives one)", t1.Sub(t0).Round(time.Millisecond))
	}
	slices.Sort(qs)
	n := len(qs)
	if n%2 == 1 {
		qps = qs[n/2]
	} else {
		qps = (qs[n/2-1] + qs[n/2]) / 2
	}
	if calls > 0 {
		avg = time.Duration(latSum / calls * float64(time.Microsecond))
	}
	return qps, avg, n, nil
}

// runBrpcClient is runOnce for the frameworks whose client is brpc's
// echo_client: it starts the server (brpc's echo_server or a gobrpc child),
// then the client process, waits -warmup, measures both processes' CPU
// over -duration, and takes QPS and average latency from the client's
// per-second lines of the window.
func runBrpcClient(fw string, sc scenario, srvProfile string) (runResult, error) {
	var res runResult
	res.external = true
	srv, err := startEchoServer(clientFrameworks[fw].server, srvProfile)
	if err != nil {
		return res, err
	}
	defer srv.stop()
	dummyPort, err := freePort()
	if err != nil {
		return res, err
	}
	cl, err := startBrpcClient(srv.address(), sc.callers, sc.payload, clientFrameworks[fw].connType, dummyPort)
	if err != nil {
		return res, err
	}
	defer cl.stop()
	failed := func(what string) error {
		return fmt.Errorf("brpc's echo_client %s:%s", what, cl.tail(10))
	}

	time.Sleep(*warmup)
	if cl.exited() {
		return res, failed("exited")
	}
	if err := srv.begin(); err != nil {
		return res, err
	}
	c0, err := cl.cpu()
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	time.Sleep(*duration)
	c1, err := cl.cpu()
	res.elapsed = time.Since(t0)
	t1 := t0.Add(res.elapsed)
	if err != nil {
		return res, failed(err.Error())
	}
	res.cli = usage{cpu: c1 - c0, noMallocs: true}
	// Before the server's end: the client quits with it.
	if p99, p999, err := brpcClientPercentiles(dummyPort); err == nil {
		res.p99, res.p999 = p99, p999
	} else {
		fmt.Fprintf(os.Stderr, "echobench: brpc's echo_client percentiles: %v\n", err)
	}
	if res.srv, err = srv.end(); err != nil {
		return res, err
	}
	// The line of the window's last second comes a moment after its end.
	time.Sleep(time.Until(t1.Add(brpcLineSlack + 50*time.Millisecond)))
	if cl.exited() {
		return res, failed("exited (with -dont_fail, a failed call aborts it)")
	}
	qps, avg, _, err := brpcWindow(cl.output(), t0, t1)
	if err != nil {
		return res, err
	}
	res.calls = int64(qps*res.elapsed.Seconds() + 0.5)
	res.avg = avg
	return res, nil
}
