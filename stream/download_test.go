package stream_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"privateassistant/schema"
)

// putArtifact stores data as an artifact of owner (file + record), as the agent does.
func putArtifact(t *testing.T, e *env, owner, id, name, mimeType string, data []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, data, 0o600))
	st := appwrite.NewStorage(e.Client)
	_, err := st.CreateFile(schema.BucketArtifacts, "f"+id, file.NewInputFile(p, name), st.WithCreateFilePermissions([]string{permission.Read(role.User(owner, ""))}))
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	_, err = schema.For[schema.Artifact](e.Store, schema.CollArtifacts).Create(context.Background(), id, owner, &schema.Artifact{OwnerID: owner, ConversationID: "c", RunID: "r",
		Filename: name, MimeType: mimeType, Size: int64(len(data)), Checksum: fmt.Sprintf("%x", sum), BucketID: schema.BucketArtifacts, FileID: "f" + id})
	require.NoError(t, err)
}

func (e *env) get(t *testing.T, path, jwt string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	c := e.open(t, path, append([]string{"Authorization", "Bearer " + jwt}, hdr...)...)
	defer c.close()
	return c.resp, c.body(t)
}

// Downloads answer as the artifacts function does (headers, 200, 206, 416; foreign like
// missing), whatever range Appwrite's own rules would refuse (one byte, the last byte, a
// suffix, a range longer than its 10 MiB cut).
func TestDownloadMatchesTheFunction(t *testing.T) {
	t.Parallel()
	e := setup(t)
	owner, jwt := e.SignUp(t, "dl@example.com", "password-dldl")
	_, other := e.SignUp(t, "dl2@example.com", "password-dl22")
	small := []byte(strings.Repeat("0123456789", 1000))
	putArtifact(t, e, owner, "a1", "../re\"port\r\n.txt", "text/plain", small)
	putArtifact(t, e, owner, "a2", "page.html", "text/html", []byte("<script>alert(1)</script>"))
	putArtifact(t, e, owner, "a3", "one.bin", "application/octet-stream", []byte{7})
	big := make([]byte, 20<<20-3) // the artifacts bucket takes 20 MiB
	for i := range big {
		big[i] = byte(i*31 + i>>12)
	}
	putArtifact(t, e, owner, "a4", "big.bin", "application/zip", big)

	headers := []string{"Content-Type", "Content-Disposition", "X-Content-Type-Options", "Cache-Control", "Content-Security-Policy", "X-Checksum-Sha256", "Content-Range", "Content-Length", "Last-Modified", "Accept-Ranges"}
	for _, tc := range []struct {
		id, rng string
		status  int
	}{
		{"a1", "", 200}, {"a1", "bytes=10-19", 206}, {"a1", "bytes=10-10", 206}, {"a1", "bytes=9999-", 206}, {"a1", "bytes=-5", 206},
		{"a1", "bytes=999999-", 416}, {"a1", "bytes=0-3,5-9", 200}, {"a2", "", 200}, {"a3", "", 200}, {"a3", "bytes=0-0", 206},
		{"a4", "bytes=1000-22000000", 206}, {"a4", fmt.Sprintf("bytes=%d-", len(big)-3), 206},
	} {
		var hdr []string
		if tc.rng != "" {
			hdr = []string{"Range", tc.rng}
		}
		resp, body := e.get(t, "/stream/artifacts/"+tc.id+"/download", jwt, hdr...)
		require.Equal(t, tc.status, resp.StatusCode, "%s %s: %s", tc.id, tc.rng, body)
		if tc.id == "a4" {
			var s, end int
			_, _ = fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/", &s, &end)
			require.Equal(t, big[s:end+1], body, tc.rng)
			continue
		}
		fn := e.Do(t, "GET", "/api/artifacts/"+tc.id+"/download", jwt, nil, hdr...)
		if tc.rng == "bytes=0-3,5-9" {
			require.Equal(t, small, body, "several ranges: the whole file")
			continue
		}
		require.Equal(t, fn.Status, resp.StatusCode, "%s %s", tc.id, tc.rng)
		require.Equal(t, fn.Body, body, "%s %s", tc.id, tc.rng)
		for _, h := range headers {
			require.Equal(t, fn.Header.Get(h), resp.Header.Get(h), "%s %s: %s", tc.id, tc.rng, h)
		}
	}

	// Foreign is missing, byte for byte, as the function answers.
	fr, fb := e.get(t, "/stream/artifacts/a1/download", other)
	mr, mb := e.get(t, "/stream/artifacts/amissing/download", other)
	fn := e.Do(t, "GET", "/api/artifacts/a1/download", other, nil)
	require.Equal(t, 404, fr.StatusCode)
	require.Equal(t, mr.StatusCode, fr.StatusCode)
	require.Equal(t, envelope(t, mb), envelope(t, fb))
	require.Equal(t, envelope(t, fn.Body), envelope(t, fb))
}

// A large download is relayed, not buffered: with the client reading only its first bytes,
// the service has read far less than the file from Appwrite; then the whole file arrives
// intact, in several ranged requests.
func TestLargeDownloadStreams(t *testing.T) {
	t.Parallel()
	e := setup(t)
	owner, jwt := e.SignUp(t, "large@example.com", "password-large")
	big := make([]byte, 20<<20) // the artifacts bucket takes 20 MiB: two ranged reads
	for i := range big {
		big[i] = byte(i*7 + i>>16)
	}
	putArtifact(t, e, owner, "big", "big.bin", "application/octet-stream", big)
	// A client with a small receive buffer, so what is in flight is bounded by the kernel's
	// buffers, far below the file.
	dialer := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10) })
		return errors.Join(err, serr)
	}}
	tr := &http.Transport{DialContext: dialer.DialContext}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest("GET", e.stream.URL+"/stream/artifacts/big/download", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+jwt)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	c := &sseConn{resp: resp}
	require.Equal(t, 200, c.resp.StatusCode)
	require.Equal(t, fmt.Sprint(len(big)), c.resp.Header.Get("Content-Length"))
	head := make([]byte, 64<<10)
	_, err = io.ReadFull(c.resp.Body, head)
	require.NoError(t, err)
	require.Equal(t, big[:len(head)], head)
	relayed := counter(t, e.svc.Metrics().Bytes)
	t.Logf("relayed %.0f of %d bytes when the client had read %d", relayed, len(big), len(head))
	require.Less(t, relayed, float64(len(big))/2, "the service holds at most a chunk and the socket buffers, not the file")
	rest, err := io.ReadAll(c.resp.Body)
	require.NoError(t, err)
	require.Equal(t, sha256.Sum256(big), sha256.Sum256(append(head, rest...)))
	require.Equal(t, float64(len(big)), counter(t, e.svc.Metrics().Bytes))
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
