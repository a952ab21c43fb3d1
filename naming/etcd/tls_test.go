package etcdnaming

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gobrpc/gobrpc/naming"
)

// certs writes a CA and, signed by it, a server certificate for 127.0.0.1
// and a client certificate; it returns their files.
type certs struct{ caFile, serverCert, serverKey, clientCert, clientKey string }

func writeCerts(t *testing.T) certs {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalECPrivateKey(k)
		require.NoError(t, err)
		return der
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gobrpc test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		require.NoError(t, err)
		return der, k
	}
	srvDER, srvKey := leaf(2, x509.ExtKeyUsageServerAuth)
	cliDER, cliKey := leaf(3, x509.ExtKeyUsageClientAuth)
	return certs{
		caFile:     write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", srvDER),
		serverKey:  write("server-key.pem", "EC PRIVATE KEY", keyDER(srvKey)),
		clientCert: write("client.pem", "CERTIFICATE", cliDER),
		clientKey:  write("client-key.pem", "EC PRIVATE KEY", keyDER(cliKey)),
	}
}

// An etcd that serves clients over TLS and requires client certificates:
// the etcd_tls_* flags let the naming service and Register in; a key
// without its certificate is an error.
func TestTLSFromFlags(t *testing.T) {
	c := writeCerts(t)
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(c.caFile)
	require.NoError(t, err)
	pool.AppendCertsFromPEM(caPEM)
	clientPair, err := tls.LoadX509KeyPair(c.clientCert, c.clientKey)
	require.NoError(t, err)
	e := startEtcdWith(t, []string{
		"--cert-file", c.serverCert, "--key-file", c.serverKey,
		"--trusted-ca-file", c.caFile, "--client-cert-auth",
	}, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientPair}})

	set := func(cert, key, ca string) {
		require.NoError(t, certFile.Set(cert))
		require.NoError(t, keyFile.Set(key))
		require.NoError(t, caFile.Set(ca))
	}
	defer set("", "", "")
	old := dialTimeoutMs.Get()
	require.NoError(t, dialTimeoutMs.SetValue(500))
	defer dialTimeoutMs.SetValue(old)

	_, err = Register(context.Background(), []string{e.Endpoint}, "/tls", "127.0.0.1:8001", "", 2*time.Second)
	assert.Error(t, err, "no TLS flags: plain TCP to a TLS port")

	set(c.clientCert, "", c.caFile)
	_, err = Register(context.Background(), []string{e.Endpoint}, "/tls", "127.0.0.1:8001", "", 2*time.Second)
	assert.ErrorContains(t, err, "go together")
	_, err = naming.Start(e.url("/tls"), &recorder{})
	assert.ErrorContains(t, err, "go together")

	set(c.clientCert, c.clientKey, c.caFile)
	reg, err := Register(context.Background(), []string{e.Endpoint}, "/tls", "127.0.0.1:8001", "", 2*time.Second)
	require.NoError(t, err)
	defer reg.Close()
	rec := &recorder{}
	ns, err := naming.Start(e.url("/tls"), rec)
	require.NoError(t, err)
	defer ns.Close()
	assert.Equal(t, []naming.Node{{Addr: "127.0.0.1:8001"}}, rec.last())
}
