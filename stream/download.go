package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/functions/httpapi"
	"privateassistant/functions/service"
	"privateassistant/schema"
)

// chunk is the longest range asked of Appwrite in one request: 1.9.6 cuts an open-ended
// range (and, in later versions, any range longer than its 20 MB read buffer) to
// MAX_OUTPUT_CHUNK_SIZE = 10 MiB, and refuses a range whose start is not below its end.
const chunk = 10 << 20

// download serves an owned artifact from Appwrite's storage as the artifacts function
// does (the same safe headers, Range with 206 and 416 through http.ServeContent), but
// streamed: the content is a remoteFile that reads Appwrite in ranged requests of at most
// one chunk, so neither the file nor a chunk is ever held whole in memory. A request with
// several ranges gets the whole file (200): a server may ignore Range.
func (s *Service) download(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
	id, err := service.PathID(r, "id")
	if err != nil {
		return err
	}
	ctx, done, err := s.begin(r)
	if err != nil {
		return err
	}
	defer done()
	art, err := schema.For[schema.Artifact](s.st, schema.CollArtifacts).GetOwned(ctx, c.User.ID, id)
	if err != nil {
		return service.StoreErr(err, "artifact")
	}
	f, err := storage.New(s.st.Client()).GetFile(art.BucketID, art.FileID)
	if err != nil {
		return service.StoreErr(schema.MapError(err), "artifact")
	}
	modified := service.DownloadHeaders(w.Header(), art)
	if strings.Contains(r.Header.Get("Range"), ",") {
		r.Header.Del("Range")
	}
	rf := &remoteFile{ctx: ctx, s: s, bucket: art.BucketID, file: art.FileID, size: int64(f.SizeOriginal)}
	defer rf.close()
	http.ServeContent(w, r, "", modified, rf)
	return nil
}

// remoteFile is an io.ReadSeeker over a file in Appwrite's storage. Reads go through one
// ranged GET at a time (at most chunk bytes), opened at the first Read after a Seek.
type remoteFile struct {
	ctx          context.Context
	s            *Service
	bucket, file string
	size         int64

	off  int64         // the next byte Read returns
	body io.ReadCloser // the open response, positioned at off
	end  int64         // the offset where body ends (exclusive)
}

func (f *remoteFile) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = f.off + offset
	case io.SeekEnd:
		abs = f.size + offset
	default:
		return 0, errors.New("remote file: bad whence")
	}
	if abs < 0 {
		return 0, errors.New("remote file: negative position")
	}
	if abs != f.off {
		f.close()
	}
	f.off = abs
	return abs, nil
}

func (f *remoteFile) Read(p []byte) (int, error) {
	if f.off >= f.size {
		return 0, io.EOF
	}
	if f.body == nil {
		if err := f.open(); err != nil {
			return 0, err
		}
	}
	if max := f.end - f.off; int64(len(p)) > max {
		p = p[:max]
	}
	n, err := f.body.Read(p)
	f.off += int64(n)
	f.s.metrics.Bytes.Add(float64(n))
	if f.off == f.end {
		f.close()
		return n, nil
	}
	if errors.Is(err, io.EOF) {
		f.close()
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (f *remoteFile) close() {
	if f.body != nil {
		_ = f.body.Close()
		f.body = nil
	}
}

// open starts the ranged GET at off: [off, off+chunk) within the file. Appwrite refuses
// a one-byte range (start >= end), so the last byte alone is asked as the two last and
// the first of them skipped; a one-byte file is fetched without a range.
func (f *remoteFile) open() error {
	start, end := f.off, min(f.off+chunk, f.size)-1
	skip := int64(0)
	switch {
	case f.size == 1:
		start, end = -1, 0
	case start == end && end+1 < f.size:
		end++
	case start == end:
		start, skip = start-1, 1
	}
	u := strings.TrimRight(f.s.cfg.Endpoint, "/") + "/storage/buckets/" + url.PathEscape(f.bucket) + "/files/" + url.PathEscape(f.file) + "/download"
	req, err := http.NewRequestWithContext(f.ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Appwrite-Project", f.s.cfg.ProjectID)
	req.Header.Set("X-Appwrite-Key", f.s.cfg.APIKey)
	want := 200
	if start >= 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", start, end))
		want = 206
	} else {
		start = 0
	}
	resp, err := f.s.dl.Do(req)
	if err != nil {
		return fmt.Errorf("download from appwrite: %w", err)
	}
	if resp.StatusCode != want {
		_ = resp.Body.Close()
		return fmt.Errorf("download from appwrite: %s for bytes %d-%d", resp.Status, start, end)
	}
	if want == 206 && resp.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", start, end, f.size) {
		_ = resp.Body.Close()
		return fmt.Errorf("download from appwrite: asked bytes %d-%d/%d, got %q", start, end, f.size, resp.Header.Get("Content-Range"))
	}
	if skip > 0 {
		if _, err := io.CopyN(io.Discard, resp.Body, skip); err != nil {
			_ = resp.Body.Close()
			return fmt.Errorf("download from appwrite: %w", err)
		}
	}
	f.body, f.end = resp.Body, end+1
	return nil
}
