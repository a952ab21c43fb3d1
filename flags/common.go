package flags

// Flags shared by the client and the server.

// MaxBodySize is brpc's -max_body_size: the largest message body accepted
// on a connection; a bigger frame closes that connection. Not reloadable,
// as in brpc.
var MaxBodySize = DefineInt64("max_body_size", 64<<20,
	"Maximum size of a single message body in all protocols", nil)
