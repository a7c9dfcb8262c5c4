package stream

import (
	"fmt"
	"strings"
	"time"

	"privateassistant/functions/httpapi"
	"privateassistant/queue"
)

// Config is the stream service's settings (envconfig; deploy/stream.env.example). Redis is
// reached with the shared PA_REDIS_* names as ACL user pa-stream.
type Config struct {
	Addr    string `envconfig:"PA_STREAM_ADDR" default:"127.0.0.1:8095"`
	OpsAddr string `envconfig:"PA_STREAM_OPS_ADDR" default:"127.0.0.1:9466"`

	Endpoint   string `envconfig:"PA_STREAM_APPWRITE_ENDPOINT"` // including /v1
	ProjectID  string `envconfig:"PA_STREAM_APPWRITE_PROJECT_ID"`
	DatabaseID string `envconfig:"PA_STREAM_DATABASE_ID" default:"privateassistant"`
	// APIKey is the service's own Appwrite key: documents.read and files.read only.
	APIKey string `envconfig:"PA_STREAM_APPWRITE_KEY"`

	RedisAddr     string `envconfig:"PA_REDIS_ADDR"`
	RedisUsername string `envconfig:"PA_REDIS_USERNAME" default:"pa-stream"`
	RedisPassword string `envconfig:"PA_REDIS_PASSWORD"`
	RedisDB       int    `envconfig:"PA_REDIS_DB" default:"0"`
	queue.RedisSecurity

	CORSOrigins []string      `envconfig:"PA_STREAM_CORS_ORIGINS"` // same origin: usually none
	JWTCacheTTL time.Duration `envconfig:"PA_STREAM_JWT_CACHE_TTL" default:"5s"`
	MemberLabel string        `envconfig:"PA_STREAM_MEMBER_LABEL" default:"member"`
	AdminLabel  string        `envconfig:"PA_STREAM_ADMIN_LABEL" default:"admin"`

	// Heartbeat is the interval of ": hb" comments on an idle stream; the proxies' read
	// timeouts must exceed it.
	Heartbeat time.Duration `envconfig:"PA_STREAM_HEARTBEAT" default:"15s"`
	// WriteTimeout bounds each write to a client (a stalled one is cut).
	WriteTimeout time.Duration `envconfig:"PA_STREAM_WRITE_TIMEOUT" default:"10s"`
	// MaxPerUser caps one user's open streams in this process (429 beyond).
	MaxPerUser int `envconfig:"PA_STREAM_PER_USER" default:"16"`
	// Readers is the number of the hub's Redis reader connections (longpoll.Hub.Readers).
	Readers int `envconfig:"PA_STREAM_READERS" default:"64"`
	// SystemEvery is how often the system panel's state (devices, queues) is read from
	// Redis while someone watches it; a change reaches the watchers within it.
	SystemEvery time.Duration `envconfig:"PA_STREAM_SYSTEM_EVERY" default:"250ms"`
	// SystemRecordsEvery is how often its Appwrite records (gpu_status, model_routes) are read.
	SystemRecordsEvery time.Duration `envconfig:"PA_STREAM_SYSTEM_RECORDS_EVERY" default:"5s"`
	// HeartbeatStale: a device heartbeat older than this reads "unknown" (the functions'
	// PA_HEARTBEAT_STALE: keep them equal).
	HeartbeatStale time.Duration `envconfig:"PA_HEARTBEAT_STALE" default:"30s"`
	// Coalesce waits this long after a first new event so a burst goes out in one write.
	Coalesce time.Duration `envconfig:"PA_STREAM_COALESCE" default:"0s"`
	// AliveEvery is the interval of the service's Redis heartbeat (alive.go; 0:
	// queue.AliveEvery). Tests only.
	AliveEvery time.Duration `ignored:"true"`
}

// withDefaults fills the system panel's settings left zero (a Config built in code).
func (c Config) withDefaults() Config {
	if c.SystemEvery == 0 {
		c.SystemEvery = 250 * time.Millisecond
	}
	if c.SystemRecordsEvery == 0 {
		c.SystemRecordsEvery = 5 * time.Second
	}
	if c.HeartbeatStale == 0 {
		c.HeartbeatStale = 30 * time.Second
	}
	return c
}

// Validate names the first bad field (zero system panel settings read as their defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case !strings.HasPrefix(c.Endpoint, "http"):
		return fmt.Errorf("PA_STREAM_APPWRITE_ENDPOINT must be an http(s) URL, got %q", c.Endpoint)
	case c.ProjectID == "":
		return fmt.Errorf("PA_STREAM_APPWRITE_PROJECT_ID is required")
	case c.APIKey == "":
		return fmt.Errorf("PA_STREAM_APPWRITE_KEY is required (documents.read, files.read)")
	case c.JWTCacheTTL < 0 || c.JWTCacheTTL > httpapi.MaxJWTCacheTTL:
		return fmt.Errorf("PA_STREAM_JWT_CACHE_TTL must be in [0, %s]", httpapi.MaxJWTCacheTTL)
	case c.Heartbeat < 100*time.Millisecond || c.Heartbeat > time.Minute:
		return fmt.Errorf("PA_STREAM_HEARTBEAT must be in [100ms, 1m]")
	case c.WriteTimeout <= 0:
		return fmt.Errorf("PA_STREAM_WRITE_TIMEOUT must be positive")
	case c.MaxPerUser < 1:
		return fmt.Errorf("PA_STREAM_PER_USER must be at least 1")
	case c.SystemEvery < 50*time.Millisecond || c.SystemEvery > time.Second:
		return fmt.Errorf("PA_STREAM_SYSTEM_EVERY must be in [50ms, 1s]")
	case c.SystemRecordsEvery < time.Second:
		return fmt.Errorf("PA_STREAM_SYSTEM_RECORDS_EVERY must be at least 1s")
	case c.HeartbeatStale <= 0:
		return fmt.Errorf("PA_HEARTBEAT_STALE must be positive")
	case c.Readers < 0 || c.Coalesce < 0:
		return fmt.Errorf("PA_STREAM_READERS and PA_STREAM_COALESCE must not be negative")
	}
	return c.Redis().Validate()
}

// Redis is how the service reaches the queue Redis.
func (c Config) Redis() queue.RedisConn {
	return queue.RedisConn{Addr: c.RedisAddr, Username: c.RedisUsername, Password: c.RedisPassword, DB: c.RedisDB, RedisSecurity: c.RedisSecurity}
}
