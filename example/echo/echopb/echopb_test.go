package echopb_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gobrpc/gobrpc/controller"
	"github.com/gobrpc/gobrpc/example/echo/echopb"
	"github.com/gobrpc/gobrpc/server"
)

// message is proto2 required, as in brpc: unset, the request cannot be
// serialized (the framework reports EREQUEST); set to "", it is sent.
func TestRequiredMessage(t *testing.T) {
	if _, err := proto.Marshal(&echopb.EchoRequest{}); err == nil {
		t.Error("an EchoRequest without message serialized")
	}
	b, err := proto.Marshal(&echopb.EchoRequest{Message: proto.String("")})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x0a, 0x00}; !bytes.Equal(b, want) {
		t.Errorf("EchoRequest{message: \"\"} = %x, want %x", b, want)
	}
}

type echoServer struct{}

func (echoServer) Echo(cntl *controller.Controller, req *echopb.EchoRequest, resp *echopb.EchoResponse, done func()) {
	defer done()
	resp.Message = req.Message
}

type registrar []*server.ServiceDesc

func (r *registrar) RegisterService(d *server.ServiceDesc) error {
	*r = append(*r, d)
	return nil
}

// loopback calls the registered handlers directly.
type loopback struct{ desc *server.ServiceDesc }

func (l loopback) CallMethod(md protoreflect.MethodDescriptor, cntl *controller.Controller, req, resp proto.Message, done func()) {
	for _, m := range l.desc.Methods {
		if l.desc.Descriptor.Methods().ByName(protoreflect.Name(m.Name)) == md {
			m.Handler(cntl, req, resp, func() {
				if done != nil {
					done()
				}
			})
			return
		}
	}
	panic("no handler for " + md.FullName())
}

func TestRegisterAndStub(t *testing.T) {
	var r registrar
	if err := echopb.RegisterEchoServiceServer(&r, nil); err == nil {
		t.Error("registering a nil server succeeded")
	}
	if err := echopb.RegisterEchoServiceServer(&r, echoServer{}); err != nil {
		t.Fatal(err)
	}
	if len(r) != 1 || r[0].Descriptor.FullName() != echopb.EchoService_ServiceName {
		t.Fatalf("registered %v", r)
	}
	if got := r[0].Descriptor.Methods().ByName("Echo").FullName(); got != echopb.EchoService_Echo_FullMethodName {
		t.Errorf("Echo's full name is %s, want %s", got, echopb.EchoService_Echo_FullMethodName)
	}

	stub := echopb.NewEchoServiceStub(loopback{r[0]})
	resp := &echopb.EchoResponse{}
	stub.Echo(controller.New(), &echopb.EchoRequest{Message: proto.String("hi")}, resp, nil)
	if resp.GetMessage() != "hi" {
		t.Errorf("echoed %q, want %q", resp.GetMessage(), "hi")
	}
}
