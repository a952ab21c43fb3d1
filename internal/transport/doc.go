// Package transport owns client connections over netpoll: dialing with a
// connect timeout, the three brpc connection types (single: one connection
// per server multiplexed by correlation id; pooled: one in-flight request
// per connection, reused; short: one connection per request) and reading
// baidu_std responses off the connection and handing each to the attempt
// waiting for it.
//
// It hides netpoll from the rest of gobrpc: channel sees Endpoints and
// ClientConns, never netpoll.Connection.
package transport
