package transport

import (
	"errors"

	"github.com/cloudwego/netpoll"

	"github.com/gobrpc/gobrpc/protocol/baidustd"
)

// NextFrame takes the next complete baidu_std frame from r, on either end
// of a connection. It blocks only while the rest of a frame already started
// is on its way: with the header buffered, Cut knows the frame's length
// before the body is in. A wrong magic is told from the first byte. The
// frame aliases r's buffer until r.Release.
func NextFrame(r netpoll.Reader, maxBodySize int) ([]byte, error) {
	if n := r.Len(); n < 4 {
		head, _ := r.Peek(n)
		if _, err := baidustd.Cut(head, maxBodySize); !errors.Is(err, baidustd.ErrNotEnoughData) {
			return nil, err
		}
	}
	hdr, err := r.Peek(baidustd.HeaderSize)
	if err != nil {
		return nil, err
	}
	frameLen, err := baidustd.Cut(hdr, maxBodySize)
	if err != nil && !errors.Is(err, baidustd.ErrNotEnoughData) {
		return nil, err
	}
	return r.Next(frameLen)
}
