package baidustd_test

import (
	"errors"
	"fmt"

	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

func Example() {
	// Client: a request with an attachment and a CRC32C checksum.
	req := baidustd.Meta{HasRequest: true, ServiceName: "example.EchoService", MethodName: "Echo",
		CorrelationID: 42}
	message := []byte("\x0a\x02hi") // a serialized EchoRequest{message: "hi"}
	req.SetChecksum(message, nil)
	wire, err := baidustd.AppendFrame(nil, &req, message, []byte("ATT"))
	if err != nil {
		panic(err)
	}

	// Server: bytes arrive in pieces; Cut says when a frame is complete.
	var buf []byte
	for _, chunk := range [][]byte{wire[:5], wire[5:]} {
		buf = append(buf, chunk...)
		n, err := baidustd.Cut(buf, baidustd.DefaultMaxBodySize)
		if errors.Is(err, baidustd.ErrNotEnoughData) {
			fmt.Println("need more data")
			continue
		}
		var in baidustd.Meta
		msg, att, err := baidustd.DecodeFrame(buf[:n], &in)
		if err == nil {
			err = baidustd.VerifyChecksum(&in, msg, att)
		}
		if err == nil {
			msg, err = baidustd.Decompress(nil, in.CompressType, msg)
		}
		fmt.Printf("%s/%s id=%d message=%q attachment=%q err=%v\n",
			in.ServiceName, in.MethodName, in.CorrelationID, msg, att, err)
		buf = buf[n:]
	}
	// Output:
	// need more data
	// example.EchoService/Echo id=42 message="\n\x02hi" attachment="ATT" err=<nil>
}

func ExampleServerErrorText() {
	fmt.Println(baidustd.ServerErrorText("127.0.0.1:8000", 1002, "Fail to find method=foo.Bar/Echo"))
	// Output: [127.0.0.1:8000][E1002]Fail to find method=foo.Bar/Echo
}
