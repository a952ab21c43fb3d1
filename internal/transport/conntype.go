package transport

import "fmt"

// ConnType is brpc's connection type.
type ConnType int

// Connection types, numbered as brpc's ConnectionType enum.
const (
	Single ConnType = 1 // one connection per server; requests multiplexed by correlation id
	Pooled ConnType = 2 // a pool of connections, each carrying one request at a time
	Short  ConnType = 4 // a new connection per request, closed after the response
)

// ParseConnType maps brpc's names ("single", "pooled", "short"; "" means
// the protocol's default, single for baidu_std) to a ConnType.
func ParseConnType(s string) (ConnType, error) {
	switch s {
	case "", "single":
		return Single, nil
	case "pooled":
		return Pooled, nil
	case "short":
		return Short, nil
	}
	return 0, fmt.Errorf("unknown connection type %q (want single, pooled or short)", s)
}

func (t ConnType) String() string {
	switch t {
	case Single:
		return "single"
	case Pooled:
		return "pooled"
	case Short:
		return "short"
	}
	return fmt.Sprintf("conntype(%d)", int(t))
}
