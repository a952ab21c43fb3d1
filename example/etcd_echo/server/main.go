// Command server is an echo server that registers itself in etcd under
// -prefix, keeps its lease alive, and deletes its key when it stops
// (Ctrl-C or SIGTERM) before it stops answering. Start several on different
// ports; example/etcd_echo/client follows them. See ../README.md.
//
//	go run ./server -port 8001 -etcd 127.0.0.1:2379
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	etcdnaming "github.com/gobrpc/gobrpc/naming/etcd"
	"github.com/gobrpc/gobrpc/server"
)

var (
	port   = flag.Int("port", 8001, "TCP port of this server")
	etcd   = flag.String("etcd", "127.0.0.1:2379", "etcd endpoints, comma-separated host:port")
	prefix = flag.String("prefix", "/services/echo", "etcd prefix the server registers under")
	tag    = flag.String("tag", "", "tag of this server in etcd (a weight for wrr/wr)")
	ttlS   = flag.Int("ttl_s", 10, "lease TTL in seconds: a crashed server disappears after it")
)

type echoService struct{ addr string }

func (s echoService) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	defer done()
	resp.Message = new(req.GetMessage() + " (from " + s.addr + ")")
}

func main() {
	flag.Parse()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(*port))
	srv := server.New(nil)
	if err := echopb.RegisterEchoServiceServer(srv, echoService{addr: addr}); err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(addr); err != nil {
		log.Fatal(err)
	}
	reg, err := etcdnaming.Register(context.Background(), strings.Split(*etcd, ","), *prefix, addr, *tag,
		time.Duration(*ttlS)*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// Stop deletes the key first, so clients stop sending before requests
	// get ELOGOFF.
	srv.OnStop(func() {
		if err := reg.Close(); err != nil {
			log.Print(err)
		}
	})
	log.Printf("echo server on %s, registered as %s", addr, reg.Key())
	srv.RunUntilAskedToQuit()
}
