package service

import (
	"bytes"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/schema"
)

// ArtifactView is artifact metadata as its owner sees it: never a path or a token.
type ArtifactView struct {
	ID             string `json:"id"`
	ConversationID string `json:"conversationId"`
	RunID          string `json:"runId"`
	Filename       string `json:"filename"`
	MimeType       string `json:"mimeType"`
	Size           int64  `json:"size"`
	Checksum       string `json:"checksum"`
	CreatedAt      string `json:"createdAt"`
}

// inlineSafe are types a browser may show as-is; everything else (HTML, SVG, XML,
// scripts, unknown types) is served as application/octet-stream. Every download is an
// attachment regardless.
var inlineSafe = map[string]bool{
	"text/plain": true, "text/csv": true, "text/markdown": true, "application/json": true,
	"application/pdf": true, "image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true,
	"application/zip": true, "application/gzip": true, "audio/mpeg": true, "audio/wav": true,
	"video/mp4": true, "video/webm": true,
}

// SafeType returns the Content-Type to serve an artifact with.
func SafeType(mimeType string) string {
	mt, _, err := mime.ParseMediaType(mimeType)
	if err != nil || !inlineSafe[strings.ToLower(mt)] {
		return "application/octet-stream"
	}
	if strings.HasPrefix(mt, "text/") {
		return mt + "; charset=utf-8"
	}
	return mt
}

// SafeFilename strips what could break out of a Content-Disposition header or a path.
func SafeFilename(name string) string {
	name = name[strings.LastIndexAny(name, `/\`)+1:]
	var b strings.Builder
	for _, r := range name {
		switch {
		case r < 0x20 || r == 0x7f || r == '"' || r == '\\' || r == ';' || r == '%':
			b.WriteRune('_')
		case unicode.IsPrint(r):
			b.WriteRune(r)
		}
	}
	out := strings.Trim(b.String(), ". ")
	if out == "" {
		out = "artifact"
	}
	if len(out) > 200 {
		out = out[:200]
	}
	return out
}

func (s *Service) artifactRoutes(a *httpapi.API) {
	a.Handle("GET /api/artifacts", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		cursor, limit, err := pageParams(r)
		if err != nil {
			return err
		}
		// In upload order by $createdAt (never $sequence, a UUIDv7 on MongoDB).
		q := schema.ListQuery{Owner: c.User.ID, Order: []string{query.OrderAsc("$createdAt")}, Cursor: cursor, Limit: limit}
		runID, convID := r.URL.Query().Get("runId"), r.URL.Query().Get("conversationId")
		switch {
		case runID != "" && queue.ValidID(runID):
			q.Filters = append(q.Filters, query.Equal("runId", runID))
		case convID != "" && queue.ValidID(convID):
			q.Filters = append(q.Filters, query.Equal("conversationId", convID))
		default:
			return fault.Invalidf("invalid_filter", "pass a valid runId or conversationId")
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if err := ownedCursor[schema.Artifact](r.Context(), st, schema.CollArtifacts, c.User.ID, cursor); err != nil {
			return err
		}
		page, err := schema.For[schema.Artifact](st, schema.CollArtifacts).List(r.Context(), q)
		if err != nil {
			return storeErr(err, "artifact")
		}
		out := make([]ArtifactView, 0, len(page.Items))
		for _, x := range page.Items {
			out = append(out, ArtifactView{ID: x.ID, ConversationID: x.ConversationID, RunID: x.RunID, Filename: x.Filename,
				MimeType: x.MimeType, Size: x.Size, Checksum: x.Checksum, CreatedAt: x.CreatedAt})
		}
		httpapi.WriteJSON(w, 200, map[string]any{"artifacts": out, "next": page.Next})
		return nil
	})

	a.Handle("GET /api/artifacts/{id}/download", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		art, err := ownedByPath[schema.Artifact](s, r, c, schema.CollArtifacts, "artifact")
		if err != nil {
			return err
		}
		cl, err := s.storageClient(c)
		if err != nil {
			return err
		}
		data, err := cl.GetFileDownload(art.BucketID, art.FileID)
		if err != nil {
			return storeErr(schema.MapError(err), "artifact")
		}
		modified := DownloadHeaders(w.Header(), art)
		// ServeContent answers Range with 206 and Content-Range, and 416 when unsatisfiable.
		http.ServeContent(w, r, "", modified, bytes.NewReader(*data))
		return nil
	})
}

// DownloadHeaders sets the safe headers of an artifact download (the stream service
// serves downloads with the same ones) and returns its modification time.
func DownloadHeaders(h http.Header, art *schema.Artifact) time.Time {
	h.Set("Content-Type", SafeType(art.MimeType))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": SafeFilename(art.Filename)}))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "private, no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("X-Checksum-Sha256", art.Checksum)
	modified, _ := time.Parse(time.RFC3339Nano, art.CreatedAt)
	return modified
}

func (s *Service) storageClient(c *httpapi.Call) (*storage.Storage, error) {
	st, err := s.store(c)
	if err != nil {
		return nil, err
	}
	return storage.New(st.Client()), nil
}
