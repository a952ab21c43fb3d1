package grpcgo

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/examples/helloworld/helloworld"
	"google.golang.org/protobuf/proto"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/rpc"
	"github.com/gobrpc/gobrpc/server"
)

// C++ brpc's gRPC (its example/grpc_c++, the helloworld Greeter, built
// outside this repository; see ../../shared/ref/brpc-build.md): set
// BRPC_GRPC_EXAMPLE_DIR to the folder holding its server and client
// binaries (its Makefile names them echo_server and echo_client).
// Skipped without it.

func brpcGRPCDir(t *testing.T) string {
	dir := os.Getenv("BRPC_GRPC_EXAMPLE_DIR")
	if dir == "" {
		t.Skip("BRPC_GRPC_EXAMPLE_DIR not set (C++ brpc's example/grpc_c++, built)")
	}
	return dir
}

var sayHello = helloworld.File_examples_helloworld_helloworld_helloworld_proto.Services().ByName("Greeter").Methods().ByName("SayHello")

func freePort(t *testing.T) int {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}

func TestGobrpcChannelCallsBrpcGRPCServer(t *testing.T) {
	dir := brpcGRPCDir(t)
	for _, gzip := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gzip), func(t *testing.T) {
			port := freePort(t)
			cmd := exec.Command(filepath.Join(dir, "echo_server"), fmt.Sprintf("-port=%d", port), fmt.Sprintf("-gzip=%v", gzip))
			cmd.Dir = dir
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			ch := grpcChannel(t, fmt.Sprintf("127.0.0.1:%d", port), "", nil)
			var resp *helloworld.HelloReply
			var cntl *controller.Controller
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				cntl = controller.New()
				if gzip {
					cntl.SetRequestCompressType(controller.CompressGzip)
				}
				resp = &helloworld.HelloReply{}
				ch.CallMethod(sayHello, cntl, &helloworld.HelloRequest{Name: "gobrpc"}, resp, nil)
				if !cntl.Failed() {
					break
				}
			}
			require.False(t, cntl.Failed(), cntl.ErrorText())
			assert.Equal(t, "Hello gobrpc", resp.GetMessage())
		})
	}
}

func TestBrpcGRPCClientCallsGobrpcServer(t *testing.T) {
	dir := brpcGRPCDir(t)
	srv := server.New(nil)
	require.NoError(t, srv.RegisterService(&rpc.ServiceDesc{
		Descriptor: helloworld.File_examples_helloworld_helloworld_helloworld_proto.Services().ByName("Greeter"),
		Methods: []rpc.MethodDesc{{
			Name: "SayHello",
			Handler: func(cntl *controller.Controller, req, resp proto.Message, done func()) {
				resp.(*helloworld.HelloReply).Message = "Hello " + req.(*helloworld.HelloRequest).GetName()
				done()
			},
		}},
	}))
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { srv.Stop(); srv.Join() })
	for _, gzip := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gzip), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			var out bytes.Buffer
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "echo_client"), "-server="+srv.ListenAddress().String(),
				"-interval_ms=100", "-timeout_ms=500", fmt.Sprintf("-gzip=%v", gzip))
			cmd.Dir = dir
			cmd.Stdout, cmd.Stderr = &out, &out
			_ = cmd.Run() // runs until killed
			log := out.String()
			assert.Contains(t, log, "Received response from "+srv.ListenAddress().String(), log)
			assert.Contains(t, log, "Hello grpc_req_from_brpc", log)
			for _, line := range strings.Split(log, "\n") {
				// glog: W and E lines are failed calls.
				assert.False(t, strings.HasPrefix(line, "W") || strings.HasPrefix(line, "E"), line)
			}
			t.Logf("brpc's client: %d responses", strings.Count(log, "Received response"))
		})
	}
}
