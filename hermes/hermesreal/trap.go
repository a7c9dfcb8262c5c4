package hermesreal

import (
	"bufio"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Trap is a local listener that stands for every outbound destination: Hermes's proxy
// settings (ProxyEnv) point at it, so any request Hermes makes beyond the loopback model
// gateway arrives here. It records the first line of each connection (CONNECT
// host:port, or an absolute-URI request), answers 403 and closes.
type Trap struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	hits []string
}

// NewTrap listens on a free 127.0.0.1 port until Close.
func NewTrap() (*Trap, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &Trap{ln: ln}
	t.wg.Add(1)
	go t.serve()
	return t, nil
}

// URL is the trap as a proxy URL (http://127.0.0.1:<port>).
func (t *Trap) URL() string { return "http://" + t.ln.Addr().String() }

func (t *Trap) serve() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			line = strings.TrimSpace(line)
			if line == "" {
				line = "(a connection that sent no request line)"
			}
			t.mu.Lock()
			t.hits = append(t.hits, line)
			t.mu.Unlock()
			_, _ = c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		}()
	}
}

// Hits returns the first line of every connection received so far.
func (t *Trap) Hits() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.hits...)
}

// Close stops listening and waits for the connections in flight.
func (t *Trap) Close() error {
	err := t.ln.Close()
	t.wg.Wait()
	return err
}

// ProxyEnv is an environment sending every outbound request to proxy: HTTP_PROXY,
// HTTPS_PROXY and ALL_PROXY (both cases) name it, and NO_PROXY exempts only the loopback
// model gateway at gatewayURL's host and port (httpx, requests and aiohttp all match a
// host:port entry), so Hermes reaches its model and nothing else directly.
func ProxyEnv(proxy, gatewayURL string) []string {
	noProxy := "127.0.0.1"
	if u, err := url.Parse(gatewayURL); err == nil && u.Host != "" {
		noProxy = u.Host
	}
	var env []string
	for _, n := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env = append(env, n+"="+proxy, strings.ToLower(n)+"="+proxy)
	}
	return append(env, "NO_PROXY="+noProxy, "no_proxy="+noProxy)
}
