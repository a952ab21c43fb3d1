package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPluginOutputCompiles generates testdata/multipb/multi.proto (two
// services, messages from its own package, from emptypb and from
// testdata/otherpb) into a scratch module that requires gobrpc through a
// replace directive, then vets it and runs a program that registers a
// server and calls the stubs through fakes.
func TestPluginOutputCompiles(t *testing.T) {
	protoc := requireProtoc(t)
	root := moduleRoot(t)
	tools := buildPlugins(t)

	mod := t.TempDir()
	cmd := exec.Command(protoc, append(append([]string{"-I", "."}, tools.protocArgs(mod)...),
		"multipb/multi.proto", "otherpb/other.proto")...)
	cmd.Dir = "testdata"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	for name, want := range map[string]bool{
		"multipb/multi.pb.go":      true,
		"multipb/multi_brpc.pb.go": true,
		"otherpb/other.pb.go":      true,
		"otherpb/other_brpc.pb.go": false, // no service, no file
	} {
		if _, err := os.Stat(filepath.Join(mod, name)); (err == nil) != want {
			t.Errorf("%s generated: %v, want %v", name, err == nil, want)
		}
	}

	goSum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// gobrpc's own requirements, so that the scratch module's graph is
	// pruned as gobrpc's is: the go command then needs no go.mod of a
	// module that building gobrpc did not put in the cache.
	var requires strings.Builder
	for _, block := range strings.SplitAfter(string(goMod), ")\n") {
		if i := strings.Index(block, "require ("); i >= 0 {
			requires.WriteString(block[i:] + "\n")
		}
	}
	files := map[string]string{
		"go.mod": "module example.com/brpctest\n\ngo 1.26\n\n" +
			"require github.com/gobrpc/gobrpc v0.0.0\n\n" + requires.String() +
			"replace github.com/gobrpc/gobrpc => " + root + "\n",
		// gobrpc's go.sum covers every module the scratch module needs, and
		// building gobrpc has put them in the module cache: the go command
		// runs offline (GOPROXY=off), with nothing to download or verify.
		"go.sum":  string(goSum),
		"main.go": useMultipb,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS="+os.Getenv("GOFLAGS")+" -mod=mod")
	for _, args := range [][]string{{"vet", "./..."}, {"run", "."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = mod, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in the scratch module: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "run" && strings.TrimSpace(string(out)) != "ok" {
			t.Fatalf("the program using the generated code says:\n%s", out)
		}
	}
}

// useMultipb uses the generated code the way a user does: it registers a
// GreeterServer on a fake Registrar and calls every handler, and calls the
// stubs through a fake Caller. It prints "ok" or what went wrong.
const useMultipb = `package main

import (
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"example.com/brpctest/multipb"
	"example.com/brpctest/otherpb"
	"github.com/gobrpc/gobrpc/channel"
	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/server"
)

type greeter struct{ calls []string }

func (g *greeter) Hello(cntl *controller.Controller, req *multipb.Ping, resp *emptypb.Empty, done func()) {
	g.calls = append(g.calls, "Hello:"+req.GetText())
	done()
}

func (g *greeter) Leave(cntl *controller.Controller, req *emptypb.Empty, resp *otherpb.Note, done func()) {
	g.calls = append(g.calls, "Leave")
	resp.Text = "bye"
	done()
}

func (g *greeter) Type(cntl *controller.Controller, req *multipb.Ping, resp *multipb.Ping, done func()) {
	g.calls = append(g.calls, "Type")
	done()
}

func (g *greeter) Caller(cntl *controller.Controller, req *multipb.Ping, resp *multipb.Ping, done func()) {
	g.calls = append(g.calls, "Caller")
	done()
}

type registrar struct{ descs []*server.ServiceDesc }

func (r *registrar) RegisterService(d *server.ServiceDesc) error {
	r.descs = append(r.descs, d)
	return nil
}

type caller struct{ methods []protoreflect.FullName }

func (c *caller) CallMethod(md protoreflect.MethodDescriptor, cntl *controller.Controller, req, resp proto.Message, done func()) {
	if md.Input().FullName() != req.ProtoReflect().Descriptor().FullName() ||
		md.Output().FullName() != resp.ProtoReflect().Descriptor().FullName() {
		fail("%s called with %T, %T", md.FullName(), req, resp)
	}
	c.methods = append(c.methods, md.FullName())
	if done != nil {
		done()
	}
}

var _ channel.Caller = (*caller)(nil)

func fail(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
	os.Exit(1)
}

func main() {
	var r registrar
	if err := multipb.RegisterGreeterServer(&r, nil); err == nil {
		fail("RegisterGreeterServer(nil) did not fail")
	}
	g := &greeter{}
	if err := multipb.RegisterGreeterServer(&r, g); err != nil {
		fail("RegisterGreeterServer: %v", err)
	}
	if len(r.descs) != 1 || r.descs[0].Descriptor.FullName() != multipb.Greeter_ServiceName {
		fail("registered %v", r.descs)
	}
	reqs := map[string]proto.Message{
		"Hello": &multipb.Ping{Text: "hi"}, "Leave": &emptypb.Empty{},
		"Type": &multipb.Ping{}, "Caller": &multipb.Ping{},
	}
	resps := map[string]proto.Message{
		"Hello": &emptypb.Empty{}, "Leave": &otherpb.Note{},
		"Type": &multipb.Ping{}, "Caller": &multipb.Ping{},
	}
	var got []string
	for _, m := range r.descs[0].Methods {
		if r.descs[0].Descriptor.Methods().ByName(protoreflect.Name(m.Name)) == nil {
			fail("method %s is not in the descriptor", m.Name)
		}
		dones := 0
		m.Handler(controller.New(), reqs[m.Name], resps[m.Name], func() { dones++ })
		if dones != 1 {
			fail("%s: done ran %d times", m.Name, dones)
		}
		got = append(got, m.Name)
	}
	if fmt.Sprint(got) != "[Hello Leave Type Caller]" || fmt.Sprint(g.calls) != "[Hello:hi Leave Type Caller]" {
		fail("handlers %v called %v", got, g.calls)
	}
	if resps["Leave"].(*otherpb.Note).GetText() != "bye" {
		fail("Leave's response was not filled")
	}

	var c caller
	stub := multipb.NewGreeterStub(&c)
	stub.Hello(controller.New(), &multipb.Ping{}, &emptypb.Empty{}, nil)
	stub.Leave(controller.New(), &emptypb.Empty{}, &otherpb.Note{}, nil)
	stub.Type(controller.New(), &multipb.Ping{}, &multipb.Ping{}, nil)
	async := false
	stub.Caller(controller.New(), &multipb.Ping{}, &multipb.Ping{}, func() { async = true })
	multipb.NewLegacyStub(&c).Old(controller.New(), &otherpb.Note{}, &otherpb.Note{}, nil)
	want := []protoreflect.FullName{
		multipb.Greeter_Hello_FullMethodName, multipb.Greeter_Leave_FullMethodName,
		multipb.Greeter_Type_FullMethodName, multipb.Greeter_Caller_FullMethodName,
		multipb.Legacy_Old_FullMethodName,
	}
	if fmt.Sprint(c.methods) != fmt.Sprint(want) || !async {
		fail("stubs called %v (done ran: %v), want %v", c.methods, async, want)
	}
	fmt.Println("ok")
}
`

// TestStreamingMethodFails runs protoc with the plugin on a service with a
// client-streaming method: protoc must fail and name the method.
func TestStreamingMethodFails(t *testing.T) {
	protoc := requireProtoc(t)
	tools := buildPlugins(t)

	cmd := exec.Command(protoc, append(append([]string{"-I", "."}, tools.protocArgs(t.TempDir())...), "streaming.proto")...)
	cmd.Dir = "testdata"
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("protoc succeeded on a streaming method:\n%s", out)
	}
	for _, want := range []string{"--go-brpc_out", "brpctest.streaming.Uploader.Upload", "client streaming", "only unary"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("protoc's error does not contain %q:\n%s", want, out)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	tools := buildPlugins(t)
	out, err := exec.Command(tools.brpcPlugin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "protoc-gen-go-brpc "+version; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}
