// Package auth is brpc's Authenticator: a client generates a credential
// that travels in the baidu_std meta (authentication_data) on the first
// request of each connection, and a server verifies it once per connection
// and hands what it learnt (the AuthContext) to every handler of that
// connection. It is wire-compatible with C++ brpc's Authenticator both
// ways: the credential is opaque bytes to the framework.
//
//	opts := channel.DefaultOptions()
//	opts.Auth = auth.Token("s3cret")           // client
//	srv := server.New(&server.Options{Auth: auth.Token("s3cret")})
package auth

import (
	"crypto/subtle"
	"errors"
	"net"
)

// Authenticator generates credentials (client side) and verifies them
// (server side), as brpc's Authenticator. Implementations must be safe for
// concurrent use.
type Authenticator interface {
	// GenerateCredential returns the credential a client sends on the
	// first request of a new connection. An error fails that request
	// with ERPCAUTH.
	GenerateCredential() (string, error)
	// VerifyCredential checks the credential a client sent on the first
	// request of its connection from client. An error is answered with
	// ERPCAUTH ("Fail to authenticate: <error>") and closes the
	// connection; otherwise the returned Context (nil is fine) is what
	// handlers of that connection see in cntl.AuthContext().
	VerifyCredential(credential string, client net.Addr) (*Context, error)
}

// Context is what a server learnt of an authenticated client: brpc's
// AuthContext.
type Context struct {
	User      string
	Group     string
	Roles     string
	Starter   string
	IsService bool
}

// Token returns an Authenticator whose credential is a shared secret: a
// client sends it, a server accepts exactly it (compared in constant
// time). The verified Context has User "token".
func Token(secret string) Authenticator { return token(secret) }

type token string

func (t token) GenerateCredential() (string, error) { return string(t), nil }

func (t token) VerifyCredential(credential string, _ net.Addr) (*Context, error) {
	if subtle.ConstantTimeCompare([]byte(credential), []byte(t)) != 1 {
		return nil, errors.New("wrong token")
	}
	return &Context{User: "token"}, nil
}
