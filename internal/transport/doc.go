// Package transport owns both ends of gobrpc's connections: a TCP
// connection carrying baidu_std frames (Conn), read by one goroutine that
// reads only as fast as the frames are handled, and written by a Writer
// that never waits for the peer (brpc's Socket::Write with KeepWrite).
//
// On top of Conn: the client's connections (ClientConn, dialed with a
// connect timeout, in brpc's three connection types: single, one
// connection per server multiplexed by correlation id; pooled, one
// in-flight request per connection, reused; short, one connection per
// request), which hand each response to the attempt waiting for it; and
// the server's accepted connections (ServerConn), which hand each request
// to the server's dispatch. channel and server see Endpoints, ClientConns
// and ServerConns, never sockets.
package transport
