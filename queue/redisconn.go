package queue

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/keyref"
)

// RedisSecurity is how a component reaches the dedicated Redis across hosts, beyond its
// address and user (PA_REDIS_ADDR, PA_REDIS_USERNAME, PA_REDIS_PASSWORD, PA_REDIS_DB,
// declared by each component's settings): TLS, a password by key reference, and Redis
// Sentinel. The agent's daemon.Settings and the functions' service.Config embed it, so
// both read the same variables (deploy/redis.conf, deploy/sentinel.conf).
type RedisSecurity struct {
	// PasswordRef names where the user's password is kept (env:NAME, file:/path, NAME);
	// it replaces PA_REDIS_PASSWORD. The password is never part of an address or a log line.
	PasswordRef string `envconfig:"PA_REDIS_PASSWORD_REF"`
	// TLS turns TLS on (deploy/redis.conf listens with TLS only).
	TLS bool `envconfig:"PA_REDIS_TLS"`
	// CA is the CA certificate that signed the server's: a file path or the PEM itself
	// (an Appwrite function variable cannot mount a file). Empty: the system roots.
	CA string `envconfig:"PA_REDIS_TLS_CA"`
	// ServerName overrides the name checked in the server certificate (default: the host
	// of the address dialled).
	ServerName string `envconfig:"PA_REDIS_TLS_SERVER_NAME"`
	// SentinelMaster and SentinelAddrs switch to Redis Sentinel: the client asks these
	// Sentinels for the primary of that name and follows a failover (PA_REDIS_ADDR unused).
	SentinelMaster string   `envconfig:"PA_REDIS_SENTINEL_MASTER"`
	SentinelAddrs  []string `envconfig:"PA_REDIS_SENTINEL_ADDRS"`
	// SentinelPasswordRef: the Sentinels' own password (requirepass in sentinel.conf).
	SentinelPasswordRef string `envconfig:"PA_REDIS_SENTINEL_PASSWORD_REF"`
}

// RedisConn is everything needed to open a connection to the dedicated Redis.
type RedisConn struct {
	Addr     string
	Username string
	Password string // the password itself (PA_REDIS_PASSWORD); or PasswordRef
	DB       int
	RedisSecurity
}

// RedisTuning are a component's pool and timeout choices.
type RedisTuning struct {
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	PoolSize                               int
}

// Validate names the first bad setting.
func (c RedisConn) Validate() error {
	switch {
	case c.SentinelMaster == "" && len(c.SentinelAddrs) > 0, c.SentinelMaster != "" && len(c.SentinelAddrs) == 0:
		return errors.New("PA_REDIS_SENTINEL_MASTER and PA_REDIS_SENTINEL_ADDRS go together")
	case c.SentinelMaster == "" && c.Addr == "":
		return errors.New("PA_REDIS_ADDR is required (or PA_REDIS_SENTINEL_MASTER with PA_REDIS_SENTINEL_ADDRS)")
	case c.Password != "" && c.PasswordRef != "":
		return errors.New("set PA_REDIS_PASSWORD or PA_REDIS_PASSWORD_REF, not both")
	case strings.Contains(c.Addr, "@") || strings.Contains(c.Addr, "://"):
		return errors.New("PA_REDIS_ADDR is host:port (no URL, no credentials)")
	case c.CA != "" && !c.TLS:
		return errors.New("PA_REDIS_TLS_CA needs PA_REDIS_TLS=true")
	}
	for _, a := range c.SentinelAddrs {
		if _, _, err := net.SplitHostPort(strings.TrimSpace(a)); err != nil {
			return fmt.Errorf("PA_REDIS_SENTINEL_ADDRS: %q is not host:port", a)
		}
	}
	return nil
}

// TLSConfig is the client TLS configuration (nil without TLS).
func (c RedisConn) TLSConfig() (*tls.Config, error) {
	if !c.TLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CA != "" {
		pem := []byte(c.CA)
		if !strings.Contains(c.CA, "-----BEGIN") {
			b, err := os.ReadFile(c.CA)
			if err != nil {
				return nil, fmt.Errorf("PA_REDIS_TLS_CA: %w", err)
			}
			pem = b
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("PA_REDIS_TLS_CA: no certificate in it")
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func (c RedisConn) password() (string, error) {
	if c.PasswordRef == "" {
		return c.Password, nil
	}
	pw, err := keyref.Resolve(c.PasswordRef)
	if err != nil {
		return "", fmt.Errorf("PA_REDIS_PASSWORD_REF: %w", err)
	}
	return pw, nil
}

// NewClient opens a client (no network yet): a plain one, or with Sentinel a failover
// client that asks the Sentinels for the primary and reconnects to a promoted replica.
// Both are *redis.Client, so asynq and every component take them alike.
func (c RedisConn) NewClient(t RedisTuning) (*redis.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tc, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	pw, err := c.password()
	if err != nil {
		return nil, err
	}
	if c.SentinelMaster != "" {
		spw := ""
		if c.SentinelPasswordRef != "" {
			if spw, err = keyref.Resolve(c.SentinelPasswordRef); err != nil {
				return nil, fmt.Errorf("PA_REDIS_SENTINEL_PASSWORD_REF: %w", err)
			}
		}
		addrs := make([]string, 0, len(c.SentinelAddrs))
		for _, a := range c.SentinelAddrs {
			addrs = append(addrs, strings.TrimSpace(a))
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: c.SentinelMaster, SentinelAddrs: addrs,
			SentinelPassword: spw, Username: c.Username, Password: pw, DB: c.DB, TLSConfig: tc,
			DialTimeout: t.DialTimeout, ReadTimeout: t.ReadTimeout, WriteTimeout: t.WriteTimeout, PoolSize: t.PoolSize}), nil
	}
	return redis.NewClient(&redis.Options{Addr: c.Addr, Username: c.Username, Password: pw, DB: c.DB, TLSConfig: tc,
		DialTimeout: t.DialTimeout, ReadTimeout: t.ReadTimeout, WriteTimeout: t.WriteTimeout, PoolSize: t.PoolSize}), nil
}
