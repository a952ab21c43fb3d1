// Package controller holds the Controller: the settings and the results of
// one RPC, on the client and on the server, as in brpc.
//
// A client fills a Controller's settings (timeout, retries, attachment ...),
// passes it to a call and reads the results (Failed, ErrorCode, LatencyUs,
// RemoteSide ...) when the call ends. A server handler receives one per
// request, reads what the client sent and may SetFailed.
//
//	cntl := controller.New()
//	cntl.SetTimeoutMs(100)
//	stub.Echo(cntl, req, resp, nil)
//	if cntl.Failed() {
//		log.Print(cntl.ErrorText())
//	}
package controller

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/errno"
	"github.com/gobrpc/gobrpc/internal/ctrl"
)

func init() {
	ctrl.Of = func(c any) *ctrl.State { return &c.(*Controller).state }
}

// unset marks a client setting the caller did not choose, so the channel's
// option applies (brpc uses -123456789 the same way).
const unset = -123456789

// CompressType is the compression applied to the message part of a
// baidu_std payload. The values are brpc's (options.proto).
type CompressType int32

// Compression types.
const (
	CompressNone   CompressType = 0
	CompressSnappy CompressType = 1
	CompressGzip   CompressType = 2
	CompressZlib   CompressType = 3
	CompressLZ4    CompressType = 4 // declared by brpc, not supported by it or by us
)

func (t CompressType) String() string {
	switch t {
	case CompressNone:
		return "none"
	case CompressSnappy:
		return "snappy"
	case CompressGzip:
		return "gzip"
	case CompressZlib:
		return "zlib"
	case CompressLZ4:
		return "lz4"
	}
	return "compress_type(" + strconv.Itoa(int(t)) + ")"
}

// ChecksumType selects the payload checksum (options.proto).
type ChecksumType int32

// Checksum types.
const (
	ChecksumNone   ChecksumType = 0
	ChecksumCRC32C ChecksumType = 1
)

// Controller carries the settings and results of one RPC. The zero value
// is ready to use; New is a convenience. A Controller serves one call at a
// time: call Reset before reusing it.
type Controller struct {
	state ctrl.State

	// client settings
	timeoutMs           int64
	maxRetry            int
	backupRequestMs     int64
	settingsInitialised bool
	logID               int64
	hasLogID            bool
	requestCode         uint64
	hasRequestCode      bool
	requestCompress     CompressType
	requestChecksum     ChecksumType
	responseCompress    CompressType

	backupPolicy BackupPolicy
	ctx          context.Context

	requestAttachment  bytes.Buffer
	responseAttachment bytes.Buffer
}

// BackupPolicy decides backup requests per RPC: brpc's
// BackupRequestPolicy. It is declared here so a Controller can hold one;
// package backup names it backup.Policy and implements the rate-limited
// one. Implementations must be safe for concurrent use.
type BackupPolicy interface {
	// GetBackupRequestMs returns the backup delay for this RPC: >= 0 to
	// use it, -1 to inherit the channel's BackupRequestMs, any other
	// negative value to send no backup.
	GetBackupRequestMs(cntl *Controller) int32
	// DoBackup is asked when the delay expires: false vetoes the backup
	// (the RPC keeps waiting for its first attempt until the deadline).
	// It runs on the process's timer goroutine, as brpc's runs on its
	// timer thread: it must answer at once, never wait.
	DoBackup(cntl *Controller) bool
	// OnRPCEnd runs exactly once when the RPC ends, success or not.
	OnRPCEnd(cntl *Controller)
}

// BackupDelayPolicy is a BackupPolicy whose delay has sub-millisecond
// resolution (brpc's has whole milliseconds). A channel asks it instead
// of GetBackupRequestMs: ok false inherits the delay of the level below,
// as GetBackupRequestMs's -1 does.
type BackupDelayPolicy interface {
	BackupPolicy
	BackupRequestDelay(cntl *Controller) (delay time.Duration, ok bool)
}

// MultiBackupPolicy is a BackupPolicy that may send more than one backup
// per RPC (brpc sends one): each further backup is due one delay after the
// previous one, goes to a server not tried yet, counts as a retry and is
// asked of DoBackup like the first.
type MultiBackupPolicy interface {
	BackupPolicy
	MaxBackupRequests(cntl *Controller) int
}

// New returns a Controller with every setting at its default.
func New() *Controller { return &Controller{} }

func (c *Controller) init() {
	if !c.settingsInitialised {
		c.timeoutMs, c.maxRetry, c.backupRequestMs = unset, unset, unset
		c.settingsInitialised = true
	}
}

// Reset makes the Controller reusable for another call: every setting goes
// back to its default and every result is cleared. Attachment buffers keep
// their capacity.
func (c *Controller) Reset() {
	reqAtt, respAtt := c.requestAttachment, c.responseAttachment
	reqAtt.Reset()
	respAtt.Reset()
	*c = Controller{requestAttachment: reqAtt, responseAttachment: respAtt}
}

// SetContext (client side) ties the call to ctx: its deadline caps the
// call's timeout, and its cancellation ends the call with ECANCELED
// (a pending backup included). The deadline left travels to the server,
// and a span ctx carries (a server's cntl.Context()) is the call's parent
// in rpcz.
func (c *Controller) SetContext(ctx context.Context) { c.ctx = ctx }

// Context is the call's context. On a client it is the one given to
// SetContext, else context.Background(). On a server it carries the
// client's deadline (the timeout it delivered) and its rpcz span, and it
// is cancelled when that deadline passes, when the client's connection
// breaks and once the call is answered; pass it to downstream calls to
// hand on what is left of the budget.
func (c *Controller) Context() context.Context {
	if c.state.Server {
		return c.state.ServerContext()
	}
	if c.ctx != nil {
		return c.ctx
	}
	return context.Background()
}

// ---- client settings ----

// SetTimeoutMs sets the deadline of the whole RPC, retries and backup
// included; -1 waits forever. It overrides the channel's TimeoutMs.
func (c *Controller) SetTimeoutMs(ms int64) {
	c.init()
	if ms > 0x7fffffff {
		ms = 0x7fffffff
	}
	if ms < -1 {
		ms = -1
	}
	c.timeoutMs = ms
}

// TimeoutMs is the timeout set on this Controller, or -1 when none was set.
// After a call it is the timeout that call used.
func (c *Controller) TimeoutMs() int64 {
	if !c.settingsInitialised || c.timeoutMs == unset {
		return -1
	}
	return c.timeoutMs
}

// TimeoutMsSetting is the value given to SetTimeoutMs, and whether it was
// given (-1, "wait forever", is a setting too).
func (c *Controller) TimeoutMsSetting() (int64, bool) {
	if !c.settingsInitialised || c.timeoutMs == unset {
		return -1, false
	}
	return c.timeoutMs, true
}

// SetMaxRetry sets how many times a failed attempt may be retried
// (a backup request counts as one). It overrides the channel's MaxRetry.
// Negative means 0; at most 1000, as brpc.
func (c *Controller) SetMaxRetry(n int) {
	c.init()
	if n < 0 {
		n = 0
	}
	if n > 1000 {
		n = 1000
	}
	c.maxRetry = n
}

// MaxRetry is the retry limit set on this Controller, or -1 when unset.
func (c *Controller) MaxRetry() int {
	if !c.settingsInitialised || c.maxRetry == unset {
		return -1
	}
	return c.maxRetry
}

// MaxRetrySetting is the value given to SetMaxRetry, and whether it was given.
func (c *Controller) MaxRetrySetting() (int, bool) {
	if !c.settingsInitialised || c.maxRetry == unset {
		return 0, false
	}
	return c.maxRetry, true
}

// SetBackupRequestMs sets the delay after which a backup request is sent;
// it overrides every backup setting of the channel. Negative disables.
func (c *Controller) SetBackupRequestMs(ms int64) {
	c.init()
	if ms > 0x7fffffff {
		ms = 0x7fffffff
	}
	c.backupRequestMs = ms
}

// BackupRequestMsSetting is the value given to SetBackupRequestMs, and
// whether it was given.
func (c *Controller) BackupRequestMsSetting() (int64, bool) {
	if !c.settingsInitialised || c.backupRequestMs == unset {
		return -1, false
	}
	return c.backupRequestMs, true
}

// SetBackupRequestPolicy sets the backup policy of this RPC; it overrides
// every backup setting of the channel. The caller keeps ownership.
func (c *Controller) SetBackupRequestPolicy(p BackupPolicy) {
	c.init()
	c.backupPolicy = p
}

// BackupRequestPolicy is the policy given to SetBackupRequestPolicy, or nil.
func (c *Controller) BackupRequestPolicy() BackupPolicy { return c.backupPolicy }

// SetLogID sets the log id carried in the request meta; servers copy it
// into their Controller so it can be passed downstream.
func (c *Controller) SetLogID(id int64) { c.logID, c.hasLogID = id, true }

// LogID is the log id: the one set by SetLogID on a client, the one the
// client sent on a server.
func (c *Controller) LogID() int64 {
	if c.state.Server {
		return c.state.LogID
	}
	return c.logID
}

// HasLogID reports whether a log id was set (client) or received (server).
func (c *Controller) HasLogID() bool {
	if c.state.Server {
		return c.state.HasLogID
	}
	return c.hasLogID
}

// SetRequestCode sets the key that consistent-hashing load balancers hash.
func (c *Controller) SetRequestCode(code uint64) { c.requestCode, c.hasRequestCode = code, true }

// RequestCode returns the request code and whether one was set.
func (c *Controller) RequestCode() (uint64, bool) { return c.requestCode, c.hasRequestCode }

// SetRequestCompressType compresses the request message (never the
// attachment) with t.
func (c *Controller) SetRequestCompressType(t CompressType) { c.requestCompress = t }

// RequestCompressType is the compression of the request message. On a
// server it is what the client used.
func (c *Controller) RequestCompressType() CompressType { return c.requestCompress }

// SetRequestChecksumType protects the request message with a checksum.
func (c *Controller) SetRequestChecksumType(t ChecksumType) { c.requestChecksum = t }

// RequestChecksumType is the checksum set for the request.
func (c *Controller) RequestChecksumType() ChecksumType { return c.requestChecksum }

// SetResponseCompressType (server side) compresses the response message.
// brpc does not mirror the request's compression; neither do we.
func (c *Controller) SetResponseCompressType(t CompressType) { c.responseCompress = t }

// ResponseCompressType is the compression of the response message.
func (c *Controller) ResponseCompressType() CompressType { return c.responseCompress }

// RequestAttachment is raw bytes sent after the request message, neither
// serialized nor compressed. A server reads the client's attachment here.
func (c *Controller) RequestAttachment() *bytes.Buffer { return &c.requestAttachment }

// ResponseAttachment is raw bytes sent after the response message. A server
// handler writes it; a client reads it after the call.
func (c *Controller) ResponseAttachment() *bytes.Buffer { return &c.responseAttachment }

// RequestUserFields are brpc's user_fields of the request: string pairs
// carried in the baidu_std meta, like HTTP headers. A client sets them
// before the call; a server handler reads what the client sent.
func (c *Controller) RequestUserFields() map[string]string {
	if c.state.RequestUserFields == nil {
		c.state.RequestUserFields = map[string]string{}
	}
	return c.state.RequestUserFields
}

// ResponseUserFields are the user_fields of the response: a server handler
// sets them, a client reads them after the call.
func (c *Controller) ResponseUserFields() map[string]string {
	if c.state.ResponseUserFields == nil {
		c.state.ResponseUserFields = map[string]string{}
	}
	return c.state.ResponseUserFields
}

// ---- results ----

// Failed reports whether the RPC failed (client) or SetFailed was called
// (server).
func (c *Controller) Failed() bool { return c.state.ErrorCode != 0 }

// ErrorCode is 0 on success, else the brpc error code.
func (c *Controller) ErrorCode() Errno { return Errno(c.state.ErrorCode) }

// ErrorText describes the failure, "" on success. Like brpc it starts with
// "[E<code>]", and each retried attempt's text is kept with an "[R<n>]"
// prefix.
func (c *Controller) ErrorText() string { return c.state.ErrorText }

// Err returns nil on success, else an *Error whose Code matches with
// errors.Is(err, controller.ERPCTIMEDOUT) and the like.
func (c *Controller) Err() error {
	if c.state.ErrorCode == 0 {
		return nil
	}
	return &Error{Code: Errno(c.state.ErrorCode), Text: c.state.ErrorText}
}

// SetFailed marks the RPC failed with code and a reason. A server handler
// calls it to send an error reply; the text sent is brpc's
// "[ip:port][E<code>]reason". Code 0 or -1 becomes EINTERNAL, as in brpc.
func (c *Controller) SetFailed(code Errno, format string, args ...any) {
	if code == 0 || code == -1 {
		code = EINTERNAL
	}
	reason := format
	if len(args) > 0 {
		reason = fmt.Sprintf(format, args...)
	}
	var b strings.Builder
	if c.state.ErrorText != "" {
		b.WriteString(c.state.ErrorText)
		b.WriteByte(' ')
	}
	if c.state.Server && c.state.LocalSide != nil {
		b.WriteByte('[')
		b.WriteString(c.state.LocalSide.String())
		b.WriteByte(']')
	}
	b.WriteString(errno.Text(code, reason))
	c.state.ErrorCode = int32(code)
	c.state.ErrorText = b.String()
}

// LatencyUs is the time from the start of the call to its end, in µs.
func (c *Controller) LatencyUs() int64 { return c.state.LatencyUs }

// RemoteSide is the server that answered (client) or the client (server).
func (c *Controller) RemoteSide() net.Addr { return c.state.RemoteSide }

// LocalSide is this end of the connection that carried the answer.
func (c *Controller) LocalSide() net.Addr { return c.state.LocalSide }

// RetriedCount counts retries, a backup request included.
func (c *Controller) RetriedCount() int { return c.state.RetriedCount }

// HasBackupRequest reports whether a backup request was actually sent.
func (c *Controller) HasBackupRequest() bool { return c.state.HasBackupRequest }

// BackupWon reports whether the backup request's answer ended the call.
func (c *Controller) BackupWon() bool { return c.state.BackupWon }

// ---- asynchronous calls ----

// Join waits until the call made with this Controller has ended, done
// included. It returns at once when no call is in flight.
func (c *Controller) Join() {
	s := &c.state
	s.Mu.Lock()
	call := s.Call
	s.Mu.Unlock()
	if call != nil {
		call.Wait()
	}
}

// StartCancel ends the call with ECANCELED if it has not ended yet. Called
// before the call starts, it makes the call fail at once. Like brpc, the
// cancellation is local: the server is not told.
func (c *Controller) StartCancel() {
	s := &c.state
	s.Mu.Lock()
	s.CancelRequested = true
	call := s.Call
	s.Mu.Unlock()
	if call != nil {
		call.Cancel()
	}
}

// ---- server side ----

// IsCanceled (server side) reports whether the client's connection broke;
// as in brpc, a client's StartCancel or an abandoned backup is not seen.
func (c *Controller) IsCanceled() bool {
	return c.state.ConnCtx != nil && c.state.ConnCtx.Err() != nil
}

// AuthContext (server side) is what the server's Authenticator verified
// of the client's connection, nil when the server has none.
func (c *Controller) AuthContext() *auth.Context { return c.state.Auth }

// Method (server side) is the full method name, e.g. "example.EchoService.Echo".
func (c *Controller) Method() string {
	if c.state.ServiceName == "" {
		return ""
	}
	return c.state.ServiceName + "." + c.state.MethodName
}

// ServerTimeoutMs (server side) is the remaining timeout the client sent in
// the meta (brpc's deliver_timeout_ms), or -1 when it sent none.
func (c *Controller) ServerTimeoutMs() int64 {
	if c.state.TimeoutMsSent <= 0 {
		return -1
	}
	return int64(c.state.TimeoutMsSent)
}
