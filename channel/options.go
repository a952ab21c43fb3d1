package channel

import (
	"fmt"
	"strings"

	"github.com/gobrpc/gobrpc/auth"
	"github.com/gobrpc/gobrpc/backup"
	"github.com/gobrpc/gobrpc/internal/transport"
	"github.com/gobrpc/gobrpc/naming"
)

// Options are brpc's ChannelOptions. Start from DefaultOptions, or use a
// literal: a zero field means brpc's default where that is unambiguous, as
// each field says. A literal differs from DefaultOptions() in exactly two
// fields, where zero is a meaningful choice: MaxRetry 0 is no retry
// (DefaultOptions: 3) and SucceedWithoutServer false makes Init fail when
// the naming service has no server yet (DefaultOptions: true). Init with
// nil options uses DefaultOptions.
type Options struct {
	// ConnectTimeoutMs bounds connecting to a server; it is also capped by
	// the RPC's deadline. 0 means the default, 200; -1 means no limit.
	ConnectTimeoutMs int32

	// TimeoutMs is the deadline of a whole RPC, retries included.
	// 0 means the default, 500; -1 means no deadline.
	// Controller.SetTimeoutMs overrides it per call.
	TimeoutMs int32

	// BackupRequestMs is the delay after which a backup request goes to
	// another server if no answer came. -1 (DefaultOptions) disables it.
	// 0 in a literal also means disabled (use Controller.SetBackupRequestMs(0)
	// for an immediate backup). A delay >= the timeout never fires.
	BackupRequestMs int32

	// BackupRequestPolicy decides backups (delay, veto, accounting); it
	// beats BackupRequestMaxRatio and BackupRequestMs. The caller owns it:
	// Close does not close it. A Controller's backup settings beat all
	// three.
	BackupRequestPolicy backup.Policy

	// BackupRequestMaxRatio caps backups at this ratio of the RPCs over a
	// sliding window: a value in (0, 1] makes the channel build and own a
	// backup.RateLimitedPolicy (window and refresh interval from the flags
	// backup_request_ratio_window_size_s and
	// backup_request_ratio_update_interval_s, strict mode from
	// backup_request_ratio_strict). -1 (DefaultOptions) or 0 in a literal
	// means the flag backup_request_max_ratio, whose default -1 is no
	// limit. Any other value is an Init error.
	BackupRequestMaxRatio float64

	// BackupRequestMaxExtraLoad turns on backups with no delay to
	// configure: a value in [0.0001, 1] makes the channel build and own a
	// backup.AdaptivePolicy with that MaxExtraLoad (backups at the
	// latency percentile matching it, held to that share of the completed
	// calls every second; see backup.AdaptiveOptions). -1
	// (DefaultOptions) or 0 in a literal means the flag
	// backup_request_max_extra_load, whose default -1 is off. Setting it
	// and BackupRequestMaxRatio both is an Init error; either set here
	// beats both flags.
	BackupRequestMaxExtraLoad float64

	// MaxRetry is how many times a failed attempt is retried, on another
	// server when there is one. 0 means no retry (DefaultOptions sets 3,
	// brpc's default). Controller.SetMaxRetry overrides it per call.
	MaxRetry int

	// Protocol is the wire protocol: "baidu_std" (the default for "") or
	// "h2:grpc", brpc's name for gRPC (unary calls to any gRPC server,
	// over HTTP/2 without TLS; see docs/en/grpc.md).
	Protocol string

	// ConnectionType is "single" (one connection per server shared by all
	// calls, the default for ""), "pooled" or "short".
	ConnectionType string

	// MaxBodySize bounds the size of a response; 0 means the
	// max_body_size default (64 MiB).
	MaxBodySize int

	// ConnectionGroup separates connections: channels to the same server
	// share connections only within one group ("" is a group too).
	ConnectionGroup string

	// NamingServiceFilter drops nodes the naming service returns before
	// they reach the load balancer; nil keeps all.
	NamingServiceFilter naming.Filter

	// SucceedWithoutServer lets Init succeed when the naming service has
	// no server yet; calls then fail with ENODATA until servers appear.
	// DefaultOptions sets it, as brpc's default; false (as in a literal
	// that does not set it) makes Init fail without a server.
	SucceedWithoutServer bool

	// Auth makes the first request of every connection carry a credential
	// (brpc's ChannelOptions.auth, wire-compatible with its
	// Authenticator); nil sends none.
	Auth auth.Authenticator

	// Interceptors wrap every call made through the channel, the first
	// outermost; see Interceptor.
	Interceptors []Interceptor
}

// DefaultOptions returns brpc's ChannelOptions defaults.
func DefaultOptions() Options {
	return Options{
		ConnectTimeoutMs:          200,
		TimeoutMs:                 500,
		BackupRequestMs:           -1,
		BackupRequestMaxRatio:     -1,
		BackupRequestMaxExtraLoad: -1,
		MaxRetry:                  3,
		SucceedWithoutServer:      true,
		Protocol:                  "baidu_std",
		ConnectionType:            "single",
		MaxBodySize:               64 << 20,
	}
}

// resolved are Options with every default filled in and validated.
type resolved struct {
	Options
	connType transport.ConnType
	grpc     bool // Protocol is h2:grpc
}

// ownedPolicy is a backup policy a channel built for itself (for
// BackupRequestMaxRatio or BackupRequestMaxExtraLoad) and closes with
// itself.
type ownedPolicy interface {
	backup.Policy
	Close()
}

// backupPolicy builds the channel's own RateLimitedPolicy or
// AdaptivePolicy when the options ask for a ratio limit or an extra load
// and name no policy.
func (r *resolved) backupPolicy(prefix string) (policy backup.Policy, owned ownedPolicy, err error) {
	if r.BackupRequestPolicy != nil {
		return r.BackupRequestPolicy, nil, nil
	}
	if r.BackupRequestMaxExtraLoad > 0 {
		adaptive, err := backup.NewAdaptivePolicy(backup.AdaptiveOptions{
			MaxExtraLoad: r.BackupRequestMaxExtraLoad,
			Name:         prefix,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("channel: %w", err)
		}
		return adaptive, adaptive, nil
	}
	if r.BackupRequestMaxRatio <= 0 {
		return nil, nil, nil
	}
	limited, err := backup.NewRateLimitedPolicy(backup.RateLimitedOptions{
		BackupRequestMs:       -1, // the channel's BackupRequestMs
		MaxBackupRatio:        r.BackupRequestMaxRatio,
		WindowSizeSeconds:     int(backup.WindowSizeFlag.Get()),
		UpdateIntervalSeconds: int(backup.UpdateIntervalFlag.Get()),
		Strict:                backup.StrictFlag.Get(),
		Name:                  prefix,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("channel: %w", err)
	}
	return limited, limited, nil
}

// resolveBackupLimits settles BackupRequestMaxRatio and
// BackupRequestMaxExtraLoad: each is off (-1) or in (0, 1]; one set in
// the options beats both flags; both set (in the options, or both flags
// when the options set neither) is an error.
func (r *resolved) resolveBackupLimits() error {
	unset := func(v float64) bool { return v == 0 || v == -1 }
	valid := func(v float64) bool { return v > 0 && v <= 1 }
	ratio, extra := r.BackupRequestMaxRatio, r.BackupRequestMaxExtraLoad
	if !unset(ratio) && !valid(ratio) {
		return fmt.Errorf("channel: invalid BackupRequestMaxRatio %v (want (0, 1], or -1 for the flag backup_request_max_ratio)", ratio)
	}
	if !unset(extra) && !(extra >= backup.MinExtraLoad && extra <= 1) {
		return fmt.Errorf("channel: invalid BackupRequestMaxExtraLoad %v (want [%g, 1], or -1 for the flag backup_request_max_extra_load)", extra, backup.MinExtraLoad)
	}
	switch {
	case valid(ratio) && valid(extra):
		return fmt.Errorf("channel: BackupRequestMaxRatio (%v) and BackupRequestMaxExtraLoad (%v) are both set; set one", ratio, extra)
	case valid(ratio):
		extra = -1
	case valid(extra):
		ratio = -1
	default:
		ratio, extra = backup.MaxRatioFlag.Get(), backup.MaxExtraLoadFlag.Get()
		if valid(ratio) && valid(extra) {
			return fmt.Errorf("channel: flags backup_request_max_ratio (%v) and backup_request_max_extra_load (%v) are both set; set one", ratio, extra)
		}
	}
	r.BackupRequestMaxRatio, r.BackupRequestMaxExtraLoad = ratio, extra
	return nil
}

func resolve(o *Options) (resolved, error) {
	var r resolved
	if o == nil {
		r.Options = DefaultOptions()
	} else {
		r.Options = *o
	}
	if r.ConnectTimeoutMs == 0 {
		r.ConnectTimeoutMs = 200
	}
	if r.ConnectTimeoutMs < -1 {
		return r, fmt.Errorf("channel: invalid ConnectTimeoutMs %d (want > 0, or -1 for no limit)", r.ConnectTimeoutMs)
	}
	if r.TimeoutMs == 0 {
		r.TimeoutMs = 500
	}
	if r.TimeoutMs < -1 {
		return r, fmt.Errorf("channel: invalid TimeoutMs %d (want > 0, or -1 for no deadline)", r.TimeoutMs)
	}
	if r.BackupRequestMs == 0 {
		r.BackupRequestMs = -1
	}
	if r.BackupRequestMs < -1 {
		return r, fmt.Errorf("channel: invalid BackupRequestMs %d (want >= 0, or -1 to disable)", r.BackupRequestMs)
	}
	if err := r.resolveBackupLimits(); err != nil {
		return r, err
	}
	if r.MaxRetry < 0 {
		return r, fmt.Errorf("channel: invalid MaxRetry %d (want >= 0)", r.MaxRetry)
	}
	if r.MaxRetry > 1000 {
		r.MaxRetry = 1000
	}
	switch r.Protocol {
	case "", "baidu_std":
		r.Protocol = "baidu_std"
	case "h2:grpc":
		r.grpc = true
	default:
		return r, fmt.Errorf("channel: unsupported protocol %q (channels speak baidu_std and h2:grpc)", r.Protocol)
	}
	ct, err := transport.ParseConnType(r.ConnectionType)
	if err != nil {
		return r, fmt.Errorf("channel: %w", err)
	}
	r.connType = ct
	r.ConnectionType = ct.String()
	r.ConnectionGroup = strings.TrimSpace(r.ConnectionGroup)
	if r.MaxBodySize == 0 {
		r.MaxBodySize = 64 << 20
	}
	if r.MaxBodySize < 0 {
		return r, fmt.Errorf("channel: invalid MaxBodySize %d", r.MaxBodySize)
	}
	return r, nil
}
