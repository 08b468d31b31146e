package redislock_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// The caller's client carries authentication: a Locker on a client with
// the password locks; one without gets the server's refusal (not "held by
// another owner"), and no error carries the password.
func TestAuthPassesThrough(t *testing.T) {
	server := testenv.RedisServers(t, 1)[0]
	const password = "s3cret-pass"
	if err := client(t, server.Addr).ConfigSet(context.Background(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	authed := redis.NewClient(&redis.Options{Addr: server.Addr, Password: password})
	t.Cleanup(func() { authed.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	// A fresh server holds first grants back for one TTL (see the package
	// doc, "Restarts"): a short one keeps the test short.
	lease, err := newLocker(t, authed, dlock.WithTTL(2*time.Second)).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)

	for _, pw := range []string{"", "wrong-" + password} {
		c := redis.NewClient(&redis.Options{Addr: server.Addr, Password: pw})
		t.Cleanup(func() { c.Close() })
		_, err := newLocker(t, c).TryLock(ctx, name)
		if err == nil || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock with password %q: %v, want the server's refusal", pw, err)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("error carries the password: %v", err)
		}
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// to dir, and returns their paths and a pool trusting the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dlock test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return certFile, keyFile, pool
}

// TLS is the caller's to set on its client: a Locker on a TLS client
// locks a TLS-only server; a plaintext client gets an error, not a lock.
func TestTLSPassesThrough(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	server := testenv.RedisTLSServer(t, certFile, keyFile)
	secure := redis.NewClient(&redis.Options{Addr: server.Addr, TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	t.Cleanup(func() { secure.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	// A fresh server holds first grants back for one TTL (see the package
	// doc, "Restarts"): a short one keeps the test short.
	lease, err := newLocker(t, secure, dlock.WithTTL(2*time.Second)).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	plain := redis.NewClient(&redis.Options{Addr: server.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { plain.Close() })
	if _, err := newLocker(t, plain).TryLock(ctx, name); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryLock in plaintext on a TLS-only server: %v, want a connection error", err)
	}
}
