package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The administrator redistest adds to a server with ACL users (Client uses it). Tests of
// least privilege use their own users (ClientAs).
const (
	adminUser     = "redistest-admin"
	adminPassword = "redistest-admin-password-0123456789"
)

// One CA per test binary signs every server's certificate (generated at test time, never
// committed).
var testCA struct {
	once sync.Once
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	err  error
}

func ca() (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	testCA.once.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			testCA.err = err
			return
		}
		tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
		der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
		if err != nil {
			testCA.err = err
			return
		}
		testCA.cert, _ = x509.ParseCertificate(der)
		testCA.key = key
		testCA.pem = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	})
	return testCA.cert, testCA.key, testCA.pem, testCA.err
}

// writeCerts writes ca.crt, redis.crt and redis.key (for 127.0.0.1 and localhost) into
// the server's directory.
func (s *Server) writeCerts() error {
	caCert, caKey, caPEM, err := ca()
	if err != nil {
		return fmt.Errorf("test CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "redistest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	s.CA, s.CAFile = caPEM, filepath.Join(s.dir, "ca.crt")
	for name, b := range map[string][]byte{
		"ca.crt":    caPEM,
		"redis.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"redis.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	} {
		if err := os.WriteFile(filepath.Join(s.dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
